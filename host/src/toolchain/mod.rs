//! The plugin author's toolchain inside the one binary, so a C or Go author
//! needs only their compiler and `kubewasm`: [`componentize`] turns the core
//! module their compiler writes into a plugin component (the WIT world's
//! type and the WASI preview1 adapter, both built in), and [`c_bindings`]
//! holds the C bindings of the built-in WIT that `kubewasm new --lang c`
//! writes into a project.

pub mod c_bindings;
pub mod componentize;

/// The WIT new plugins target: the newest version this host implements.
/// The toolchain owns it (it embeds it in components and generates the C
/// bindings from it); the scaffold writes it into new projects.
pub const PLUGIN_WIT: &str = include_str!("../../../wit/v0.2.0/plugin.wit");

pub use componentize::{Adapter, ComponentizeError, Componentized, Options, componentize};
