//! replay source (in progress).
