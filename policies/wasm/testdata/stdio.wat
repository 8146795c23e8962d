;; stdio.wat: a test module for policies/wasm (scripts/build-wasm.sh builds it).
;; policy_configure writes a line to WASI standard error and one to standard
;; output (through fd_write), so the tests can see where they go.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "guest says hi\n")  ;; 14 bytes at 0
  (data (i32.const 16) "to stdout\n")     ;; 10 bytes at 16
  ;; iovecs at 32 (stderr) and 40 (stdout); bytes written at 48
  (data (i32.const 32) "\00\00\00\00\0e\00\00\00\10\00\00\00\0a\00\00\00")
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32)
    (drop (call $fd_write (i32.const 2) (i32.const 32) (i32.const 1) (i32.const 48)))
    (drop (call $fd_write (i32.const 1) (i32.const 40) (i32.const 1) (i32.const 48)))
    (i32.const 0))
  (func (export "retry_decide") (param i32 i32 i64 i64 i64) (result i64) (i64.const 0)))
