use crate::mapping::spec::MethodSpec;

pub static SPECS: &[MethodSpec] = &[];
