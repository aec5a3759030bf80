package config

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
)

// libvirtURIForms is what CheckLibvirtURI accepts, as its errors and the
// docs say it.
const libvirtURIForms = `"auto"; qemu:///system or qemu+unix:///system, optionally with ?socket=<absolute path>; or qemu:///embed?root=<absolute path>`

// CheckLibvirtURI accepts only the libvirt URIs the agent has a use for: a
// local QEMU driver over a UNIX socket, or the embedded driver. libvirt's
// other transports reach further than labelling this host needs, and the
// key may come from a ConfigMap and apply without a restart: qemu+ext runs
// a program of the URI's choosing, qemu+ssh and qemu+libssh run ssh, and
// qemu+tcp and qemu+tls talk to another host's libvirt, whose CPU is not
// this node's. The other drivers (xen, lxc, test, ...) describe no QEMU.
func CheckLibvirtURI(uri string) error {
	if uri == LibvirtURIAuto {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("labeller.libvirtURI %q: %s; accepted: %s", uri, why, libvirtURIForms)
	}
	if uri == "" {
		return bad("empty")
	}
	u, err := url.Parse(uri)
	if err != nil {
		return bad("not a URI")
	}
	if u.Opaque != "" || u.User != nil || u.Host != "" || u.Fragment != "" || u.RawFragment != "" {
		return bad("only a local connection, with no host, user or fragment, is accepted")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("its query does not parse")
	}
	switch {
	case (u.Scheme == "qemu" || u.Scheme == "qemu+unix") && u.Path == "/system":
		if err := onlyParam(q, "socket", false); err != nil {
			return bad(err.Error())
		}
	case u.Scheme == "qemu" && u.Path == "/embed":
		if err := onlyParam(q, "root", true); err != nil {
			return bad(err.Error())
		}
	case u.Scheme == "qemu" || u.Scheme == "qemu+unix":
		return bad("the path must be /system or, with qemu, /embed")
	default:
		return bad("transport or driver " + u.Scheme + " is not accepted")
	}
	return nil
}

// onlyParam checks that q holds no parameter but name, at most once, with
// an absolute, clean path as its value; required says it must be there.
func onlyParam(q url.Values, name string, required bool) error {
	for k := range q {
		if k != name {
			return fmt.Errorf("parameter %q is not accepted", k)
		}
	}
	v, ok := q[name]
	switch {
	case !ok && required:
		return fmt.Errorf("parameter %s is required", name)
	case !ok:
		return nil
	case len(v) != 1:
		return fmt.Errorf("parameter %s given %d times", name, len(v))
	case !path.IsAbs(v[0]) || path.Clean(v[0]) != v[0] || slices.Contains([]byte(v[0]), 0):
		return errors.New("parameter " + name + " must be an absolute, clean path")
	}
	return nil
}
