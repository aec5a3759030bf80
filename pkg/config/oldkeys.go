package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// Deprecation is an old key a config file still uses: Parse has read its
// value into New, and the caller logs one warning for it (LogDeprecations),
// at start and at every reload, until the file says New.
type Deprecation struct {
	Old string // e.g. drain.maxConcurrentNodes
	New string // e.g. slots.limit
}

func (d Deprecation) String() string {
	return fmt.Sprintf("config key %s is deprecated: it is read as %s; rename it in the file", d.Old, d.New)
}

// LogDeprecations logs a warning for each old key.
func LogDeprecations(logger *slog.Logger, path string, ds []Deprecation) {
	for _, d := range ds {
		logger.Warn("Deprecated configuration key; it still works, under its new name", "path", path, "key", d.Old, "newKey", d.New)
	}
}

// oldSlotKeys are the slot keys that lived in the drain section until the
// slot got one word (docs/glossary.md): the key in drain, and its key in
// slots.
var oldSlotKeys = [][2]string{
	{"maxConcurrentNodes", "limit"},
	{"leaseNamespace", "namespace"},
	{"pools", "pools"},
	{"slotSilenceBound", "heartbeatBound"},
}

// oldPoolLimit and poolLimit are a pool's old and new key for its limit.
const (
	oldPoolLimit = "maxConcurrentNodes"
	poolLimit    = "limit"
)

// migrateOldKeys moves the old slot keys of a config file (as JSON) to their
// new place, and says which it moved. A file that sets an old key and its new
// one is refused: which of the two is meant cannot be told. js comes back
// unchanged when it holds no old key.
func migrateOldKeys(js []byte) ([]byte, []Deprecation, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // keep numbers as written, for the strict decode
	var doc map[string]any
	if dec.Decode(&doc) != nil {
		return js, nil, nil // the strict decode says what is wrong
	}
	drain, ok := doc["drain"].(map[string]any)
	if !ok {
		return js, nil, nil
	}
	var ds []Deprecation
	var errs []string
	for _, k := range oldSlotKeys {
		v, ok := drain[k[0]]
		if !ok {
			continue
		}
		old, niu := "drain."+k[0], "slots."+k[1]
		slots, isMap := doc["slots"].(map[string]any)
		if doc["slots"] == nil {
			slots, isMap = map[string]any{}, true
			doc["slots"] = slots
		}
		if !isMap {
			continue // the strict decode refuses such a slots
		}
		if _, both := slots[k[1]]; both {
			errs = append(errs, fmt.Sprintf("%s and %s are both set: %s is the old name of %s; keep only %s", old, niu, old, niu, niu))
			continue
		}
		delete(drain, k[0])
		if k[0] == "pools" {
			renamed, err := renameOldPoolLimits(v)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", old, err))
				continue
			}
			if renamed {
				ds = append(ds, Deprecation{Old: "drain.pools[]." + oldPoolLimit, New: "slots.pools[]." + poolLimit})
			}
		}
		slots[k[1]] = v
		ds = append(ds, Deprecation{Old: old, New: niu})
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	if len(ds) == 0 {
		return js, nil, nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, err
	}
	return out, ds, nil
}

// renameOldPoolLimits renames maxConcurrentNodes to limit in every pool of
// list (a decoded JSON list), and says whether any had it.
func renameOldPoolLimits(list any) (bool, error) {
	pools, ok := list.([]any)
	if !ok {
		return false, nil // the strict decode says what is wrong
	}
	renamed := false
	for i, p := range pools {
		pool, ok := p.(map[string]any)
		if !ok {
			continue
		}
		v, ok := pool[oldPoolLimit]
		if !ok {
			continue
		}
		if _, both := pool[poolLimit]; both {
			return false, fmt.Errorf("[%d] sets both %s and %s: %s is the old name of %s; keep only %s", i, oldPoolLimit, poolLimit, oldPoolLimit, poolLimit, poolLimit)
		}
		delete(pool, oldPoolLimit)
		pool[poolLimit] = v
		renamed = true
	}
	return renamed, nil
}

// The old names of the slot flags, which follow their keys.
const (
	oldSlotLimitFlag          = "drain-max-concurrent-nodes"
	oldSlotNamespaceFlag      = "drain-lease-namespace"
	oldSlotPoolsFlag          = "drain-pools"
	oldSlotHeartbeatBoundFlag = "drain-slot-silence-bound"
)

// addOldSlotFlags keeps the flags of the old slot keys working, hidden and
// deprecated (pflag prints a warning naming the new flag when one is used),
// for the DaemonSets and Deployments that already pass them.
func (c *Config) addOldSlotFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.Slots.Limit, oldSlotLimitFlag, c.Slots.Limit, "Old name of --slots-limit.")
	_ = fs.MarkDeprecated(oldSlotLimitFlag, "use --slots-limit")
	fs.StringVar(&c.Slots.Namespace, oldSlotNamespaceFlag, c.Slots.Namespace, "Old name of --slots-namespace.")
	_ = fs.MarkDeprecated(oldSlotNamespaceFlag, "use --slots-namespace")
	fs.Var(&oldPools{jsonList[PoolConfig]{&c.Slots.Pools, poolsExample}}, oldSlotPoolsFlag, "Old name of --slots-pools; its pools may still say maxConcurrentNodes for limit.")
	_ = fs.MarkDeprecated(oldSlotPoolsFlag, "use --slots-pools, with limit for maxConcurrentNodes")
	fs.Var(durationValue{&c.Slots.HeartbeatBound}, oldSlotHeartbeatBoundFlag, "Old name of --slots-heartbeat-bound.")
	_ = fs.MarkDeprecated(oldSlotHeartbeatBoundFlag, "use --slots-heartbeat-bound")
}

// RenamedKey is an old key, its old flag and its new key, for the reference.
type RenamedKey struct{ Old, OldFlag, New string }

// RenamedKeys lists the old slot keys.
func RenamedKeys() []RenamedKey {
	flags := map[string]string{
		"maxConcurrentNodes": oldSlotLimitFlag, "leaseNamespace": oldSlotNamespaceFlag,
		"pools": oldSlotPoolsFlag, "slotSilenceBound": oldSlotHeartbeatBoundFlag,
	}
	var out []RenamedKey
	for _, k := range oldSlotKeys {
		out = append(out, RenamedKey{Old: "drain." + k[0], OldFlag: flags[k[0]], New: "slots." + k[1]})
		if k[0] == "pools" {
			out = append(out, RenamedKey{Old: "drain.pools[]." + oldPoolLimit, OldFlag: oldSlotPoolsFlag, New: "slots.pools[]." + poolLimit})
		}
	}
	return out
}

// oldPools is --drain-pools: the pools of --slots-pools, whose limit may
// still be called maxConcurrentNodes.
type oldPools struct{ jsonList[PoolConfig] }

func (v *oldPools) Set(s string) error {
	var list any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&list); err != nil {
		return fmt.Errorf("want a JSON list such as %s: %w", v.example, err)
	}
	if _, err := renameOldPoolLimits(list); err != nil {
		return err
	}
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return v.jsonList.Set(string(b))
}

// oldKeysNote tells the reader of a refusal that names a new key that the
// file said the old one.
func oldKeysNote(ds []Deprecation) string {
	if len(ds) == 0 {
		return ""
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Old + " as " + d.New
	}
	return " (old keys are read under their new names: " + strings.Join(names, ", ") + ")"
}
