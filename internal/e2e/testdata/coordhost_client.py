#!/usr/bin/python3
"""A coordhost.v1 client in Python: grpcio and protobuf, no generated code.

Usage:
    coordhost_client.py --target HOST:PORT --descriptors FILE SCENARIO

FILE is a serialized google.protobuf.FileDescriptorSet holding the
coordhost.v1 files and every file they import (and google/rpc/status.proto,
for error details). The Go test (internal/e2e) writes it at run time from the
registry of the generated gen/coordhost/v1 package, so this client speaks
the daemon's current API without a protoc step: message classes are built
from the descriptors, and each call is a plain grpcio call on the method's
path.

A scenario is a function named scenario_<NAME>(api) below; `SCENARIO` picks
it by NAME. Each step it takes prints one JSON line to stdout:

    {"step": "create", "response": {...}}                  the response, as protobuf JSON
    {"step": "get_closed", "error": {"code": "NOT_FOUND",  an RPC error, with its
        "message": "...", "details": [{...}]}}             coordhost.v1.ErrorDetail(s)

A failed expectation prints {"fail": "..."} and exits 1; the Go test reads
the steps and checks them too.

Runs with Debian's /usr/bin/python3 and python3-grpcio / python3-protobuf
(grpcio 1.51, protobuf 4.21 on bookworm), started with -I.
"""

import argparse
import json
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

TIMEOUT = 10  # seconds, per call


class Failure(Exception):
    """A scenario's expectation that did not hold."""


def expect(cond, what):
    if not cond:
        raise Failure(what)


class API:
    """coordhost.v1 over one grpcio channel, typed by the descriptors."""

    def __init__(self, target, descriptors_path):
        with open(descriptors_path, "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
        self.pool = descriptor_pool.DescriptorPool()
        # Add each file after the files it imports.
        pending = {fd.name: fd for fd in fds.file}
        added = set()
        while pending:
            ready = [fd for fd in pending.values() if all(dep in added for dep in fd.dependency)]
            if not ready:
                raise Failure("descriptor set has unresolvable imports: %s" % sorted(pending))
            for fd in ready:
                self.pool.AddSerializedFile(fd.SerializeToString())
                added.add(fd.name)
                del pending[fd.name]
        self.channel = grpc.insecure_channel(target)
        self._classes = {}

    def close(self):
        self.channel.close()

    def message_class(self, full_name):
        cls = self._classes.get(full_name)
        if cls is None:
            desc = self.pool.FindMessageTypeByName(full_name)
            if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
                cls = message_factory.GetMessageClass(desc)
            else:
                cls = message_factory.MessageFactory(self.pool).GetPrototype(desc)
            self._classes[full_name] = cls
        return cls

    def to_dict(self, msg):
        return json_format.MessageToDict(msg, preserving_proto_field_name=True, descriptor_pool=self.pool)

    def _method(self, method):
        """method: "coordhost.v1.SessionService/CreateSession"."""
        service, name = method.split("/")
        md = self.pool.FindServiceByName(service).methods_by_name[name]
        req_cls = self.message_class(md.input_type.full_name)
        resp_cls = self.message_class(md.output_type.full_name)
        return md, req_cls, resp_cls

    def _request(self, req_cls, fields):
        return json_format.ParseDict(fields or {}, req_cls(), descriptor_pool=self.pool)

    def call(self, method, fields=None):
        """A unary call; fields is the request as protobuf JSON (a dict).
        Returns the response as a dict; raises grpc.RpcError."""
        md, req_cls, resp_cls = self._method(method)
        expect(not md.client_streaming and not md.server_streaming, method + " is a streaming method")
        fn = self.channel.unary_unary(
            "/" + method, request_serializer=req_cls.SerializeToString, response_deserializer=resp_cls.FromString
        )
        return self.to_dict(fn(self._request(req_cls, fields), timeout=TIMEOUT))

    def stream(self, method, requests):
        """A streaming call (server, client or bidirectional): requests is
        an iterable of dicts (one for a server stream). Returns an iterator
        of response dicts and the call (call.cancel() ends it)."""
        md, req_cls, resp_cls = self._method(method)
        msgs = (self._request(req_cls, r) for r in requests)
        kw = dict(request_serializer=req_cls.SerializeToString, response_deserializer=resp_cls.FromString)
        path = "/" + method
        if md.client_streaming and md.server_streaming:
            call = self.channel.stream_stream(path, **kw)(msgs, timeout=TIMEOUT)
        elif md.server_streaming:
            call = self.channel.unary_stream(path, **kw)(next(msgs), timeout=TIMEOUT)
        else:
            raise Failure(method + " is not a server or bidirectional stream")
        return (self.to_dict(m) for m in call), call

    def error(self, err):
        """An RpcError as a dict: code name, message and the ErrorDetails
        from the grpc-status-details-bin trailer (a google.rpc.Status)."""
        out = {"code": err.code().name, "message": err.details(), "details": []}
        for key, value in err.trailing_metadata() or ():
            if key != "grpc-status-details-bin":
                continue
            status = self.message_class("google.rpc.Status").FromString(value)
            for any_ in status.details:
                name = any_.type_url.rsplit("/", 1)[-1]
                detail = self.message_class(name).FromString(any_.value)
                out["details"].append(dict(self.to_dict(detail), **{"@type": name}))
        return out


def step(name, **record):
    print(json.dumps(dict(step=name, **record)), flush=True)


def ok(api, name, method, fields=None):
    """A call that must succeed: prints and returns its response."""
    try:
        resp = api.call(method, fields)
    except grpc.RpcError as err:
        step(name, error=api.error(err))
        raise Failure("%s: %s failed: %s" % (name, method, api.error(err)))
    step(name, response=resp)
    return resp


def fails(api, name, method, fields, code, reason):
    """A call that must fail with code and an ErrorDetail of reason:
    prints and returns the error."""
    try:
        resp = api.call(method, fields)
    except grpc.RpcError as err:
        e = api.error(err)
        step(name, error=e)
        expect(e["code"] == code, "%s: code %s, want %s" % (name, e["code"], code))
        expect(
            any(d.get("reason") == reason for d in e["details"]),
            "%s: details %s lack reason %s" % (name, e["details"], reason),
        )
        return e
    step(name, response=resp)
    raise Failure("%s: %s succeeded, want %s" % (name, method, code))


SESSION = "coordhost.v1.SessionService/"


def scenario_session(api):
    """A session's life: create, renew, get, keep alive over a stream,
    close; then it is gone (NOT_FOUND with REASON_SESSION_NOT_FOUND)."""
    s = ok(api, "create", SESSION + "CreateSession", {"ttl": "30s"})["session"]
    sid = s["session_id"]
    expect(len(sid) == 32 and s["ttl"] == "30s", "create: %s" % s)

    r = ok(api, "renew", SESSION + "RenewSession", {"session_id": sid})["session"]
    expect(r["session_id"] == sid and r["expires_at"] >= s["expires_at"], "renew: %s after %s" % (r, s))

    g = ok(api, "get", SESSION + "GetSession", {"session_id": sid})["session"]
    expect(g["session_id"] == sid and g["expires_at"] == r["expires_at"], "get: %s, renewed %s" % (g, r))

    responses, _ = api.stream(SESSION + "KeepAlive", [{"session_id": sid}] * 2)
    kas = list(responses)
    step("keepalive", responses=kas)
    expect(len(kas) == 2 and all(k["session"]["session_id"] == sid for k in kas), "keepalive: %s" % kas)

    c = ok(api, "close", SESSION + "CloseSession", {"session_id": sid})
    expect(c.get("closed") is True, "close: %s" % c)

    fails(api, "get_closed", SESSION + "GetSession", {"session_id": sid}, "NOT_FOUND", "REASON_SESSION_NOT_FOUND")
    fails(api, "renew_bad_id", SESSION + "RenewSession", {"session_id": "nope"}, "INVALID_ARGUMENT", "REASON_INVALID_FIELD")


LOCK = "coordhost.v1.LockService/"


def scenario_session_lock(api):
    """A lock taken through a session: GetSession lists it, CloseSession
    releases it, and the next holder gets a higher fencing token."""
    sid = ok(api, "create", SESSION + "CreateSession", {"ttl": "10s"})["session"]["session_id"]
    g = ok(api, "acquire", LOCK + "Acquire", {"name": "job", "session_id": sid, "wait": "5s"})["grant"]
    expect(g["session_id"] == sid and g["ttl"] == "10s" and int(g["fencing_token"]) >= 1, "acquire: %s" % g)
    fails(api, "try_held", LOCK + "TryAcquire", {"name": "job"}, "ABORTED", "REASON_CONTENDED")
    listed = ok(api, "get", SESSION + "GetSession", {"session_id": sid}).get("grants", [])
    expect([x["grant_id"] for x in listed] == [g["grant_id"]], "get lists %s" % listed)
    c = ok(api, "close", SESSION + "CloseSession", {"session_id": sid})
    expect(c.get("closed") is True and c.get("released_grants") == "1", "close: %s" % c)
    n = ok(api, "next", LOCK + "TryAcquire", {"name": "job"})["grant"]
    expect(int(n["fencing_token"]) > int(g["fencing_token"]), "next token %s after %s" % (n, g))
    r = ok(api, "release", LOCK + "Release", {"grant_id": n["grant_id"]})
    expect(r.get("result") == "RELEASE_RESULT_RELEASED", "release: %s" % r)


def main():
    scenarios = {k[len("scenario_"):]: v for k, v in globals().items() if k.startswith("scenario_")}
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", required=True, help="HOST:PORT of the daemon (h2c)")
    p.add_argument("--descriptors", required=True, help="FileDescriptorSet file")
    p.add_argument("scenario", choices=sorted(scenarios))
    args = p.parse_args()
    api = API(args.target, args.descriptors)
    try:
        scenarios[args.scenario](api)
    except Failure as f:
        print(json.dumps({"fail": str(f)}), flush=True)
        return 1
    finally:
        api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
