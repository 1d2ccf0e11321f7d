//! `kubewasm crds`: the CustomResourceDefinitions of the plugin objects.

use std::io::Write;

use anyhow::Context;

pub(crate) fn crds() -> anyhow::Result<()> {
    let yaml = kubewasm::crd::crds_yaml().context("cannot render the CRDs")?;
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(())
}
