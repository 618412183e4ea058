//! scripted source (in progress).
