;; hostile.wat: a test module for policies/wasm (scripts/build-wasm.sh builds it).
;; It hands the host terminal control text: ESC [2J (clear the screen), a
;; newline and a fake "lock acquired" line, in its policy_host.log line, on
;; its standard output, in its policy_configure error (when there is a
;; config) and in every partition refusal. retry_decide traps.
(module
  (import "policy_host" "log" (func $log (param i32 i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; The text, 19 bytes, and an iovec {ptr 0, len 19} for fd_write.
  (data (i32.const 0) "\1b[2J\0alock acquired\0a")
  (data (i32.const 64) "\00\00\00\00\13\00\00\00")
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param $len i32) (result i32)
    (call $log (i32.const 0) (i32.const 19))
    (drop (call $fd_write (i32.const 1) (i32.const 64) (i32.const 1) (i32.const 80)))
    (if (i32.gt_u (local.get $len) (i32.const 0))
      (then
        (memory.copy (i32.const 1024) (i32.const 0) (i32.const 19))
        (return (i32.const -20))))
    (i32.const 0))
  (func (export "partition_key") (param i32) (result i32)
    (memory.copy (i32.const 1024) (i32.const 0) (i32.const 19))
    (i32.const -20))
  (func (export "retry_decide") (param i32 i32 i64 i64 i64) (result i64)
    (unreachable)))
