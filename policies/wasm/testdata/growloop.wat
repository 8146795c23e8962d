;; growloop.wat: a test module for policies/wasm (scripts/build-wasm.sh builds it).
;; retry_decide grows memory one page at a time:
;;   attempt 1: until memory.grow fails or memory reaches 1024 pages (a cap
;;              of its own, so that a host without a limit still stops at
;;              64 MiB), then returns the size in pages;
;;   attempt 2: forever, ignoring failures (until the call is stopped).
(module
  (memory (export "memory") 1)
  (func (export "policy_abi_version") (result i32) (i32.const 1))
  (func (export "policy_io_ptr") (result i32) (i32.const 1024))
  (func (export "policy_io_cap") (result i32) (i32.const 1024))
  (func (export "policy_configure") (param i32) (result i32) (i32.const 0))
  (func (export "retry_decide") (param $attempt i32) (param i32 i64 i64 i64) (result i64)
    (if (i32.eq (local.get $attempt) (i32.const 2))
      (then (loop $forever (drop (memory.grow (i32.const 1))) (br $forever))))
    (block $done
      (loop $more
        (br_if $done (i32.ge_u (memory.size) (i32.const 1024)))
        (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
        (br $more)))
    (i64.extend_i32_u (memory.size))))
