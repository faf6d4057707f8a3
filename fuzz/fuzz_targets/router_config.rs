#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::router_config(data));
