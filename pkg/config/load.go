package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Load reads the YAML file at path into a copy of base. An unknown key is an
// error that names the key. Flags that were set explicitly on fs are then
// applied again on top, so the command line wins over the file. The old keys
// the file still uses come back for the caller to log (LogDeprecations).
func Load(path string, base Config, fs *pflag.FlagSet) (Config, []Deprecation, error) {
	data, err := readLimited(path)
	if err != nil {
		return Config{}, nil, fmt.Errorf("reading config file: %w", err)
	}
	if len(data) > MaxConfigFileBytes {
		return Config{}, nil, fmt.Errorf("config file %s: larger than %d bytes (1 MiB), the most a ConfigMap holds; this is not a node-agent configuration", path, MaxConfigFileBytes)
	}
	cfg, deprecated, err := Parse(data, base)
	if err != nil {
		return Config{}, nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if fs == nil {
		return cfg, deprecated, nil
	}
	// Re-apply explicit flags by binding a fresh flag set to cfg.
	again := pflag.NewFlagSet("reapply", pflag.ContinueOnError)
	cfg.AddFlags(again)
	var ferr error
	fs.Visit(func(f *pflag.Flag) {
		if ferr != nil || f.Name == "config" {
			return
		}
		target := again.Lookup(f.Name)
		if target == nil {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			if tv, ok := target.Value.(pflag.SliceValue); ok {
				ferr = tv.Replace(sv.GetSlice())
				return
			}
		}
		ferr = target.Value.Set(f.Value.String())
	})
	if ferr != nil {
		return Config{}, nil, ferr
	}
	return cfg, deprecated, nil
}

// readLimited reads at most MaxConfigFileBytes+1 bytes of the file at path:
// enough to tell that it is too large, without reading a large one whole.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxConfigFileBytes+1))
}

// Parse decodes YAML config data over base, refusing unknown keys. An old
// key (oldkeys.go) is read as its new one and listed in the Deprecations;
// a file that sets an old key and its new one is refused.
func Parse(data []byte, base Config) (Config, []Deprecation, error) {
	cfg := base
	if len(bytes.TrimSpace(data)) == 0 {
		return cfg, nil, nil
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Config{}, nil, fmt.Errorf("not valid YAML: %w", err)
	}
	js, deprecated, err := migrateOldKeys(js)
	if err != nil {
		return Config{}, nil, err
	}
	// Who may write the file decides which keys it may hold (trust.go);
	// asked first, so that such a key is refused for what it is even when
	// its value would not decode.
	if err := daemonSetOnlyInFile(js); err != nil {
		return Config{}, nil, err
	}
	// sigs.k8s.io/json matches keys case-sensitively (encoding/json does
	// not), so a misspelt key such as minCpuModel is refused, not accepted.
	strict, err := sigsjson.UnmarshalStrict(js, &cfg)
	if err != nil {
		if key := badDurationKey(js); key != "" {
			return Config{}, nil, fmt.Errorf("%s: %w; use a duration such as 90s, 5m or 1h", key, err)
		}
		return Config{}, nil, errors.New(strings.TrimPrefix(err.Error(), "json: ") + oldKeysNote(deprecated))
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = strings.TrimPrefix(e.Error(), "json: ")
		}
		return Config{}, nil, errors.New(strings.Join(msgs, "; ") + oldKeysNote(deprecated))
	}
	return cfg, deprecated, nil
}

// durationKeys are the keys whose values are Go durations.
var durationKeys = [][2]string{
	{"labeller", "rediscoveryPeriod"},
	{"labeller", "discoveryTimeout"},
	{"drain", "timeout"},
	{"maintenance", "gateBound"},
	{"maintenance", "hookBound"},
	{"drain", "deleteAfter"},
	{"shutdown", "drainBudget"},
	{"shutdown", "safetyMargin"},
	{"reboot", "loopBound"},
	{"reboot", "checkInterval"},
	{"reboot", "slotHoldBound"},
	{"reboot", "beforeRebootBound"},
	{"reboot", "blockerBound"},
	{"reboot", "minInterval"},
	{"slots", "heartbeatBound"},
	{"silences", "duration"},
	{"notifications", "timeout"},
	{"notifications", "giveUpAfter"},
}

// badDurationKey finds the first duration key in js whose value does not
// parse, because metav1.Duration's own error does not name the key.
func badDurationKey(js []byte) string {
	var doc map[string]any
	if json.Unmarshal(js, &doc) != nil {
		return ""
	}
	for _, k := range durationKeys {
		section, _ := doc[k[0]].(map[string]any)
		v, ok := section[k[1]]
		if !ok {
			continue
		}
		s, isString := v.(string)
		if _, err := time.ParseDuration(s); !isString || err != nil {
			return k[0] + "." + k[1]
		}
	}
	return ""
}

// joinErrors joins errs on one line, so that a refused start prints a
// one-line message.
func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}
