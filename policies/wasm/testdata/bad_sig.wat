;; bad_sig.wat: a test module for policies/wasm (scripts/build-wasm.sh builds it).
;; retry_decide has the wrong signature. Its start function logs
;; "instantiated", so a test can tell that Load refused it before
;; instantiating it.
(module
  (import "policy_host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "instantiated")
  (func $start (call $log (i32.const 0) (i32.const 12)))
  (start $start)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "retry_decide") (param i32 i32) (result i64) (i64.const 0))
)
