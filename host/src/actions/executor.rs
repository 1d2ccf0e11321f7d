pub trait Placeholder {}
