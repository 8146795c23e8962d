;; trap.wat: a test module for policies/wasm (scripts/build-wasm.sh builds it).
;; Every policy call traps.
(module
  (memory (export "memory") 1)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "retry_decide") (param i32 i32 i64 i64 i64) (result i64) (unreachable))
  (func (export "starvation_bound") (param i32 i32 i64) (result i64) (unreachable))
  (func (export "partition_key") (param i32) (result i32) (unreachable)))
