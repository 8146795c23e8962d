;; grow.wat: a test module for policies/wasm (scripts/build-wasm.sh builds it).
;; retry_decide grows memory by attempt pages (trapping if it cannot) and
;; returns the new size in pages.
(module
  (memory (export "memory") 1)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "retry_decide") (param $attempt i32) (param i32 i64 i64 i64) (result i64)
    (if (i32.eq (memory.grow (local.get $attempt)) (i32.const -1)) (then (unreachable)))
    (i64.extend_i32_u (memory.size))))
