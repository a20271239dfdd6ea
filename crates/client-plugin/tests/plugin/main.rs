//! Integration tests of the client library and the gateway over real TCP on 127.0.0.1 (one test
//! binary, so the fake cluster harness is compiled and linked once).

mod client;
mod gateway;
mod harness;
mod limits;
