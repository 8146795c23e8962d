package host

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// strictJSON is Connect's JSON codec, but refusing unknown fields:
// connect's own discards them, so a misspelt "session" (for "sessionId")
// would silently take a grant outside the session. An unknown field is
// InvalidArgument (connect's, without an ErrorDetail).
type strictJSON struct{ name string }

// jsonCodecs replace connect's JSON codecs, for both names it serves JSON
// under.
func jsonCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(strictJSON{name: "json"}),
		connect.WithCodec(strictJSON{name: "json; charset=utf-8"}),
	}
}

func (c strictJSON) Name() string { return c.name }

func (c strictJSON) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return protojson.MarshalOptions{}.Marshal(msg)
}

func (c strictJSON) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	return protojson.UnmarshalOptions{}.Unmarshal(b, msg)
}
