package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Kind is one kind of server in the test fleet: a product (Redis or Valkey)
// at a major.minor version, installed by scripts/redis-servers.sh (`make
// redis`). Pass one to Start, StartN or StartCluster with WithKind; range
// over Kinds for a table test that runs on every kind:
//
//	for _, k := range redistest.Kinds() {
//		t.Run(k.String(), func(t *testing.T) {
//			s := redistest.Start(t, redistest.WithKind(k))
//			if !k.Has(redistest.HashFieldExpiry) {
//				// expect the documented "unsupported server" error
//			}
//		})
//	}
type Kind int

// The kinds of the fleet. The zero Kind is none of them.
const (
	// Redis70 is Debian bookworm's redis-server 7.0, installed with apt
	// ($COORDHOST_REDIS7_SERVER, else redis-server on PATH). The default.
	Redis70 Kind = iota + 1
	// Redis80 is Debian trixie's redis-server 8.0, unpacked into
	// .cache/redis-8 ($COORDHOST_REDIS8_SERVER).
	Redis80
	// Redis86 is Debian experimental's redis-server 8.6, unpacked with
	// trixie's loader and libraries into .cache/redis-86
	// ($COORDHOST_REDIS86_SERVER).
	Redis86
	// Valkey81 is Debian trixie's valkey-server 8.1, unpacked into
	// .cache/valkey-8 ($COORDHOST_VALKEY8_SERVER). It reports
	// valkey_version 8.1.x and, for old clients, redis_version 7.2.4.
	Valkey81
)

// Feature is a server capability that some kinds of the fleet lack. Ask with
// Kind.Has or Server.Has; the package's tests check every answer against a
// live server of every kind.
type Feature int

// The features that differ between kinds.
const (
	// HashFieldExpiry is a TTL per hash field: HPEXPIRE, HPTTL, HPERSIST,
	// HEXPIRE and friends (Redis 7.4+). Redis 8.0 and 8.6 have it; Redis
	// 7.0 and Valkey 8.1 do not (Valkey has it from 9.0).
	HashFieldExpiry Feature = iota + 1
	// HashGetSetEx is HGETEX, HSETEX and HGETDEL (Redis 8.0+): Redis 8.0
	// and 8.6.
	HashGetSetEx
	// SetIfEq is SET key value IFEQ current, a compare-and-set without a
	// script (Valkey 8.1+, Redis 8.4+): Valkey 8.1 and Redis 8.6.
	SetIfEq
	// DelEx is DELEX key IFEQ value, a compare-and-delete without a script
	// (Redis 8.4+): Redis 8.6 only.
	DelEx
)

type kindInfo struct {
	name     string // String(): product-major.minor
	product  string // "Redis" or "Valkey"
	version  string // major.minor
	env      string // environment variable naming the server binary
	cache    string // binary below the repository root; "" means PATH
	path     string // binary looked up on PATH when env and cache are empty
	features []Feature
}

var kindTable = [...]kindInfo{
	Redis70: {
		name: "redis-7.0", product: "Redis", version: "7.0",
		env: "COORDHOST_REDIS7_SERVER", path: "redis-server",
	},
	Redis80: {
		name: "redis-8.0", product: "Redis", version: "8.0",
		env: "COORDHOST_REDIS8_SERVER", cache: ".cache/redis-8/bin/redis-server",
		features: []Feature{HashFieldExpiry, HashGetSetEx},
	},
	Redis86: {
		name: "redis-8.6", product: "Redis", version: "8.6",
		env: "COORDHOST_REDIS86_SERVER", cache: ".cache/redis-86/bin/redis-server",
		features: []Feature{HashFieldExpiry, HashGetSetEx, SetIfEq, DelEx},
	},
	Valkey81: {
		name: "valkey-8.1", product: "Valkey", version: "8.1",
		env: "COORDHOST_VALKEY8_SERVER", cache: ".cache/valkey-8/bin/valkey-server",
		features: []Feature{SetIfEq},
	},
}

// Kinds returns every kind of the fleet, Redis first, oldest first:
// Redis70, Redis80, Redis86, Valkey81.
func Kinds() []Kind { return []Kind{Redis70, Redis80, Redis86, Valkey81} }

func (k Kind) info() (kindInfo, bool) {
	if k < Redis70 || int(k) >= len(kindTable) {
		return kindInfo{}, false
	}
	return kindTable[k], true
}

// String returns the kind's name, usable as a subtest name: "redis-7.0",
// "redis-8.0", "redis-8.6" or "valkey-8.1".
func (k Kind) String() string {
	if i, ok := k.info(); ok {
		return i.name
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Product returns "Redis" or "Valkey" ("" for an invalid Kind).
func (k Kind) Product() string {
	i, _ := k.info()
	return i.product
}

// Version returns the kind's major.minor version, e.g. "8.6" for Redis86
// and "8.1" for Valkey81; a Server of this kind has a Version with this
// prefix.
func (k Kind) Version() string {
	i, _ := k.info()
	return i.version
}

// EnvVar returns the environment variable that names the kind's server
// binary, e.g. "COORDHOST_VALKEY8_SERVER" (written to .cache/redis-env.sh by
// `make redis`).
func (k Kind) EnvVar() string {
	i, _ := k.info()
	return i.env
}

// Has reports whether servers of this kind have feature f.
func (k Kind) Has(f Feature) bool {
	i, _ := k.info()
	return slices.Contains(i.features, f)
}

// Features returns every Feature, in declaration order.
func Features() []Feature { return []Feature{HashFieldExpiry, HashGetSetEx, SetIfEq, DelEx} }

// String returns the feature's name, e.g. "HashFieldExpiry".
func (f Feature) String() string {
	switch f {
	case HashFieldExpiry:
		return "HashFieldExpiry"
	case HashGetSetEx:
		return "HashGetSetEx"
	case SetIfEq:
		return "SetIfEq"
	case DelEx:
		return "DelEx"
	}
	return fmt.Sprintf("Feature(%d)", int(f))
}

// kindOfMajor maps Version's major number to its kind (0 if none).
func kindOfMajor(major int) Kind {
	switch major {
	case 7:
		return Redis70
	case 8:
		return Redis80
	}
	return 0
}

const installHint = "run `make redis` (or `make test`), then `. ./.cache/redis-env.sh`"

// findServer returns the server binary of kind k: $<k.EnvVar()> if set,
// else the copy below the repository's .cache (or, for Redis70,
// redis-server on PATH). A missing or non-executable binary is an error
// naming it and how to install it.
func findServer(k Kind) (string, error) {
	i, ok := k.info()
	if !ok {
		return "", fmt.Errorf("unknown server kind %v (want one of %v)", k, Kinds())
	}
	bin := os.Getenv(i.env)
	switch {
	case bin != "":
	case i.path != "":
		p, err := exec.LookPath(i.path)
		if err != nil {
			return "", fmt.Errorf("%s %s: $%s is unset and %s is not on PATH; %s", i.product, i.version, i.env, i.path, installHint)
		}
		return p, nil
	default:
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("%s %s: $%s is unset and %v; %s", i.product, i.version, i.env, err, installHint)
		}
		bin = filepath.Join(root, filepath.FromSlash(i.cache))
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s %s server %s is missing or not executable ($%s); %s", i.product, i.version, bin, i.env, installHint)
	}
	return bin, nil
}

// checkKind checks a server's INFO server reply against kind k and returns
// its own version (valkey_version on Valkey, else redis_version) and its
// redis_version.
func checkKind(k Kind, bin, info string) (version, redisVersion string, err error) {
	redisVersion = infoField(info, "redis_version")
	valkey := infoField(info, "valkey_version")
	version = redisVersion
	product := "Redis"
	if valkey != "" || infoField(info, "server_name") == "valkey" {
		version, product = valkey, "Valkey"
	}
	if product != k.Product() || !strings.HasPrefix(version, k.Version()+".") {
		return "", "", fmt.Errorf("%s is %s %s (redis_version %s), want %s %s.x (%s); check $%s or %s",
			bin, product, version, redisVersion, k.Product(), k.Version(), k, k.EnvVar(), installHint)
	}
	return version, redisVersion, nil
}
