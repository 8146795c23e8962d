;; latefail.wat: a retry policy for host's end-to-end test (coordpol v1)
;; that passes the load-time self-test (attempt 1) and then breaks: attempt 2
;; traps, attempt 3 and later loop forever (until the call deadline). A lock
;; using it must fall back to the built-in backoff and still acquire.
;; Build: wat2wasm latefail.wat -o latefail.wasm (scripts/build-wasm.sh).
(module
  (memory (export "memory") 1 1)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "retry_decide")
        (param $attempt i32) (param $reason i32) (param $elapsed_ms i64)
        (param $hint_ms i64) (param $rand i64) (result i64)
    (if (i32.eq (local.get $attempt) (i32.const 2)) (then (unreachable)))
    (if (i32.ge_s (local.get $attempt) (i32.const 3))
      (then (loop $forever (br $forever))))
    (i64.const 5)))
