;; writersfirst.wat: a starvation policy for host's rwlock test (coordpol
;; v1). A waiting writer holds new readers off at once (bound 0) while fewer
;; than 4 readers hold; with more, it lets them in for 50 ms first.
;; Build: wat2wasm writersfirst.wat -o writersfirst.wasm (scripts/build-wasm.sh).
(module
  (memory (export "memory") 1 1)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "starvation_bound")
        (param $readers i32) (param $writers i32) (param $oldest_ms i64) (result i64)
    (if (result i64) (i32.ge_s (local.get $readers) (i32.const 4))
      (then (i64.const 50))
      (else (i64.const 0)))))
