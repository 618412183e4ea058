//! procinfo source (in progress).
