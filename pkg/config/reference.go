package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/spf13/pflag"
)

// Key is one configuration key as documented: its config-file path, its flag,
// its default and what it means. The list is derived from the Config struct
// and the flags bound to its fields, so docs cannot drift from the code.
type Key struct {
	Path    string // e.g. drain.timeout
	Flag    string // e.g. drain-timeout
	Type    string
	Default string
	Usage   string
}

// Keys returns every key of Config that has a flag, in flag order.
func Keys() []Key {
	c := Default()
	paths := map[uintptr]string{}
	collectPaths(reflect.ValueOf(&c).Elem(), "", paths)
	fs := pflag.NewFlagSet("keys", pflag.ContinueOnError)
	fs.SortFlags = false
	c.AddFlags(fs)
	var out []Key
	fs.VisitAll(func(f *pflag.Flag) {
		path := paths[valuePointer(f.Value)]
		if path == "" || f.Deprecated != "" {
			// A deprecated flag is an old name of a key listed under
			// its new one.
			return
		}
		def := f.DefValue
		if def == "" || def == "[]" {
			def = `""`
			if t := f.Value.Type(); t == "stringSlice" || t == "stringArray" {
				def = "[]"
			}
		}
		out = append(out, Key{Path: path, Flag: f.Name, Type: f.Value.Type(), Default: def, Usage: f.Usage})
	})
	return out
}

// collectPaths maps the address of every leaf field of v to its key path.
func collectPaths(v reflect.Value, prefix string, out map[uintptr]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct && f.Type.Name() != "Duration" {
			collectPaths(fv, path+".", out)
			continue
		}
		out[fv.Addr().Pointer()] = path
	}
}

// valuePointer returns the address of the field a flag value writes to.
func valuePointer(v pflag.Value) uintptr {
	if d, ok := v.(durationValue); ok {
		return reflect.ValueOf(d.d).Pointer()
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer {
		return 0
	}
	// pflag's slice values are structs whose first field points at the slice.
	if e := rv.Elem(); e.Kind() == reflect.Struct && e.NumField() > 0 && e.Field(0).Kind() == reflect.Pointer {
		return e.Field(0).Pointer()
	}
	return rv.Pointer()
}

// Reference renders Keys as the Markdown configuration reference.
func Reference() string {
	var b strings.Builder
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("<!-- Generated from pkg/config by `make docs`; a test fails when it is out of date. -->\n\n")
	b.WriteString("Every key of the `--config` YAML file of `node-agent run` is also a flag. ")
	b.WriteString("A flag given on the command line wins over the file. Unknown keys and bad values are refused ")
	b.WriteString("at start, naming the key. The `labeller` keys are applied again when the file changes (a mounted ")
	b.WriteString("ConfigMap); an invalid change is refused with an Event on the Node and the last good configuration ")
	b.WriteString("stays. Other keys take effect at the next start. Durations use Go syntax: `90s`, `5m`, `1h`.\n\n")
	b.WriteString("Keys that choose an identity, a credential, a path, a bus, a command or what the host runs are taken ")
	b.WriteString("only from the command line and the environment (the DaemonSet's arguments), never from the file: a file ")
	b.WriteString("that sets one is refused, at start and at a reload, with a line that names the key and its flag. ")
	b.WriteString("[Who may set each key](#who-may-set-each-key) lists them, and the worst a hostile value of every key can do. ")
	b.WriteString("[security.md](security.md) says who can change what, actor by actor.\n\n")
	b.WriteString("| key | flag | type | default | meaning |\n| --- | --- | --- | --- | --- |\n")
	for _, k := range Keys() {
		fmt.Fprintf(&b, "| `%s` | `--%s` | %s | `%s` | %s |\n", k.Path, k.Flag, k.Type, k.Default, strings.ReplaceAll(k.Usage, "|", `\|`))
	}
	b.WriteString("\n## Renamed keys\n\n")
	b.WriteString("The slot keys moved out of `drain` into `slots` when the slot got one name (docs/glossary.md). ")
	b.WriteString("A file or a flag with an old name still works: the agent and the coordinator log a warning per old key, ")
	b.WriteString("at start and at every reload, naming the new one. A file that sets an old key and its new one is refused.\n\n")
	b.WriteString("| old key | old flag | new key |\n| --- | --- | --- |\n")
	for _, r := range RenamedKeys() {
		fmt.Fprintf(&b, "| `%s` | `--%s` | `%s` |\n", r.Old, r.OldFlag, r.New)
	}
	b.WriteString("\n## Who may set each key\n\n")
	b.WriteString("The agent runs as root on every node. Each key is read only from a place whose writers are trusted with ")
	b.WriteString("what it chooses (pkg/config/trust.go; a key without a class fails a test):\n\n")
	fmt.Fprintf(&b, "- **%s**: the command line and environment of the DaemonSet's pod (the coordinator's too). Whoever may write them chooses the pod template, which is root on every node already; a config file that sets such a key is refused.\n", WriterDaemonSet)
	fmt.Fprintf(&b, "- **%s**: the `--config` file, mounted from the ConfigMap `node-agent-config`, which a namespace editor or a Role on that one ConfigMap may write (a flag of the same name wins over it). The DaemonSet and the coordinator mount only its key `config.yaml`, so other keys a writer adds to the ConfigMap never reach the pod.\n\n", WriterConfigMap)
	b.WriteString("| key | set in | the worst a hostile value can do |\n| --- | --- | --- |\n")
	for _, p := range KeyPaths() {
		tr := trust[p]
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p, tr.Writer, strings.ReplaceAll(tr.Worst, "|", `\|`))
	}
	b.WriteString("\n## Bounds\n\n")
	b.WriteString("Every number and size has a lower and an upper bound; a value outside them is refused at start ")
	b.WriteString("(and at a reload) with an error that names the key, the value, the bound and why. ")
	fmt.Fprintf(&b, "The `--config` file itself may hold at most %d bytes (1 MiB), the most a ConfigMap holds.\n\n", MaxConfigFileBytes)
	b.WriteString("| key | min | max | why |\n| --- | --- | --- | --- |\n")
	for _, bd := range Bounds() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", bd.Key, bd.Min, bd.Max, strings.ReplaceAll(bd.Why, "|", `\|`))
	}
	return b.String()
}
