//! Object sources behind the informers.

pub mod local;
