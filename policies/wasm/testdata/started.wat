;; started.wat: a test module for policies/wasm (scripts/build-wasm.sh builds it).
;; A valid retry policy whose start function logs "instantiated" (so a test
;; can tell whether its code ran) and grows the memory to 2 pages, where its
;; I/O area lies: only instantiating it shows that the area fits.
(module
  (import "policy_host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "instantiated")
  (func $start
    (call $log (i32.const 0) (i32.const 12))
    (drop (memory.grow (i32.const 1))))
  (start $start)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 65536))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "retry_decide") (param i32 i32 i64 i64 i64) (result i64) (i64.const 7)))
