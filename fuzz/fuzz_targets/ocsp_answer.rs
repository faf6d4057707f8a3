#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::ocsp_answer(data));
