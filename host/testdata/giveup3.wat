;; giveup3.wat: a retry policy for host's end-to-end test (coordpol v1).
;; Attempts 1 and 2 retry after exactly 20 ms, ignoring wake-ups; attempt 3
;; gives up. A waiter that follows it makes three attempts and fails.
;; Build: wat2wasm giveup3.wat -o giveup3.wasm (scripts/build-wasm.sh).
(module
  (memory (export "memory") 1 1)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "retry_decide")
        (param $attempt i32) (param $reason i32) (param $elapsed_ms i64)
        (param $hint_ms i64) (param $rand i64) (result i64)
    (if (result i64) (i32.ge_s (local.get $attempt) (i32.const 3))
      (then (i64.const -1))
      (else (i64.const -22)))))
