;; constant.wat: an example coordhost retry policy written by hand in the
;; WebAssembly text format (coordpol v1 ABI, see plugins/sdk/guest).
;; Build: wat2wasm constant.wat -o constant.wasm (scripts/build-wasm.sh).
;;
;; After every failed attempt it waits a constant delay: a contended attempt
;; waits for a wake-up bounded by the delay; an attempt that failed with an
;; error (reason 2) sleeps exactly the delay. It never gives up (the
;; caller's context decides).
;;
;; Config: config = { delay_ms = 25 }. To stay tiny this module does not
;; parse JSON: the delay is the first run of decimal digits in the config
;; (so the config should hold that one number); no digits means 10 ms.
(module
  (memory (export "memory") 1 1)

  ;; The I/O area: 4 KiB at offset 1024.
  (global $io_ptr i32 (i32.const 1024))
  (global $io_cap i32 (i32.const 4096))
  (global $delay (mut i64) (i64.const 10))

  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (global.get $io_ptr))
  (func (export "policy_io_cap") (result i32) (global.get $io_cap))

  ;; policy_configure(len): scan the config for the first number.
  (func (export "policy_configure") (param $len i32) (result i32)
    (local $p i32) (local $end i32) (local $c i32) (local $v i64) (local $seen i32)
    (local.set $p (global.get $io_ptr))
    (local.set $end (i32.add (global.get $io_ptr) (local.get $len)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
        (local.set $c (i32.sub (i32.load8_u (local.get $p)) (i32.const 48)))
        (if (i32.lt_u (local.get $c) (i32.const 10))
          (then
            ;; a digit: v = v*10 + c, refusing absurd values (> 10^12 ms)
            (local.set $seen (i32.const 1))
            (local.set $v (i64.add (i64.mul (local.get $v) (i64.const 10))
                                   (i64.extend_i32_u (local.get $c))))
            (if (i64.gt_u (local.get $v) (i64.const 1000000000000))
              (then (return (i32.const 1)))))
          (else
            ;; not a digit: stop after the first number
            (br_if $done (local.get $seen))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (if (local.get $seen) (then (global.set $delay (local.get $v))))
    (i32.const 0))

  ;; retry_decide: result >= 0 waits for a wake-up at most that many ms,
  ;; result <= -2 retries after -result-2 ms, -1 gives up.
  (func (export "retry_decide")
        (param $attempt i32) (param $reason i32) (param $elapsed_ms i64)
        (param $hint_ms i64) (param $rand i64) (result i64)
    (if (result i64) (i32.eq (local.get $reason) (i32.const 2))
      (then (i64.sub (i64.const -2) (global.get $delay)))
      (else (global.get $delay))))
)
