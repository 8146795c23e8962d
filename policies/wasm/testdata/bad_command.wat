;; bad_command.wat: a test module for policies/wasm (scripts/build-wasm.sh builds it).
;; It is a WASI command (exports _start).
(module
  (memory (export "memory") 1)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "retry_decide") (param i32 i32 i64 i64 i64) (result i64) (i64.const 0))
  (func (export "_start"))
)
