//! wrong-version: exports the handler of a different WIT version
//! (kubewasm:plugin@0.0.9), so the host's version check can be shown.
wit_bindgen::generate!({
    inline: "
        package kubewasm:plugin@0.0.9;
        interface handler {
            register: func(config: string) -> result<string, string>;
        }
        world plugin { export handler; }
    ",
    world: "plugin",
});

struct Old;

impl exports::kubewasm::plugin::handler::Guest for Old {
    fn register(_config: String) -> Result<String, String> {
        Ok(String::new())
    }
}

export!(Old);
