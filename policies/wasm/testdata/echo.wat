;; echo.wat: a test module implementing all three kinds so the tests can
;; see exactly what the host passes and provoke each kind of failure.
;; Build: scripts/build-wasm.sh. Used by policies/wasm tests only.
(module
  (import "policy_host" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "bad config")
  (data (i32.const 16) "echo: refused")

  (global $io_ptr i32 (i32.const 4096))
  (global $io_cap i32 (i32.const 8192))
  (global $configured (mut i64) (i64.const 0))
  (global $cfg_len (mut i64) (i64.const 0))

  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (global.get $io_ptr))
  (func (export "policy_io_cap") (result i32) (global.get $io_cap))

  ;; Counts its calls, logs the config, refuses a config starting with 'F'.
  (func (export "policy_configure") (param $len i32) (result i32)
    (global.set $configured (i64.add (global.get $configured) (i64.const 1)))
    (global.set $cfg_len (i64.extend_i32_u (local.get $len)))
    (if (i32.gt_u (local.get $len) (i32.const 0))
      (then
        (call $log (global.get $io_ptr) (local.get $len))
        (if (i32.eq (i32.load8_u (global.get $io_ptr)) (i32.const 70)) ;; 'F'
          (then
            (memory.copy (global.get $io_ptr) (i32.const 0) (i32.const 10))
            (return (i32.const -11))))))
    (i32.const 0))

  ;; The attempt selects what to return.
  (func (export "retry_decide")
        (param $attempt i32) (param $reason i32) (param $elapsed i64)
        (param $hint i64) (param $rand i64) (result i64)
    (if (i32.eq (local.get $attempt) (i32.const 1)) (then (return (local.get $elapsed))))
    (if (i32.eq (local.get $attempt) (i32.const 2)) (then (return (i64.sub (i64.const -2) (local.get $hint)))))
    (if (i32.eq (local.get $attempt) (i32.const 3)) (then (return (i64.const -1))))
    (if (i32.eq (local.get $attempt) (i32.const 4)) (then (return (local.get $rand))))
    (if (i32.eq (local.get $attempt) (i32.const 5)) (then (return (i64.shr_u (local.get $rand) (i64.const 32)))))
    (if (i32.eq (local.get $attempt) (i32.const 6)) (then (return (i64.extend_i32_u (local.get $reason)))))
    (if (i32.eq (local.get $attempt) (i32.const 7)) (then (return (i64.const 0x7fffffffffffffff))))
    (if (i32.eq (local.get $attempt) (i32.const 8)) (then (return (global.get $configured))))
    (if (i32.eq (local.get $attempt) (i32.const 9)) (then (return (global.get $cfg_len))))
    (if (i32.eq (local.get $attempt) (i32.const 10)) (then (unreachable)))
    (if (i32.eq (local.get $attempt) (i32.const 11)) (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $attempt) (i32.const 12))
      (then
        (if (i32.eq (memory.grow (i32.wrap_i64 (local.get $rand))) (i32.const -1))
          (then (unreachable)))
        (return (i64.extend_i32_u (memory.size)))))
    (if (i32.eq (local.get $attempt) (i32.const 13))
      (then
        ;; log the I/O area's first byte range 200 times (rate limit test)
        (loop $again
          (call $log (global.get $io_ptr) (i32.const 4))
          (local.set $rand (i64.add (local.get $rand) (i64.const 1)))
          (br_if $again (i64.lt_u (local.get $rand) (i64.const 200))))
        (return (i64.const 0))))
    (i64.extend_i32_u (local.get $attempt)))

  ;; 0 readers: unbounded; 99 readers: trap; else a mix of the inputs.
  (func (export "starvation_bound")
        (param $readers i32) (param $writers i32) (param $wait i64) (result i64)
    (if (i32.eqz (local.get $readers)) (then (return (i64.const -1))))
    (if (i32.eq (local.get $readers) (i32.const 99)) (then (unreachable)))
    (i64.add
      (i64.add (i64.mul (i64.extend_i32_u (local.get $readers)) (i64.const 1000000))
               (i64.mul (i64.extend_i32_u (local.get $writers)) (i64.const 1000)))
      (local.get $wait)))

  ;; Echoes its input, unless the kind starts with 'x' (bad result), 'e'
  ;; (refusal with a message), 't' (trap) or 'z' (empty key).
  (func (export "partition_key") (param $len i32) (result i32)
    (local $c i32)
    (local.set $c (i32.load8_u (i32.add (global.get $io_ptr) (i32.const 4))))
    (if (i32.eq (local.get $c) (i32.const 120)) (then (return (i32.const 0x7fffffff))))
    (if (i32.eq (local.get $c) (i32.const 101))
      (then
        (memory.copy (global.get $io_ptr) (i32.const 16) (i32.const 13))
        (return (i32.const -14))))
    (if (i32.eq (local.get $c) (i32.const 116)) (then (unreachable)))
    (if (i32.eq (local.get $c) (i32.const 122)) (then (return (i32.const 0))))
    (local.get $len))
)
