package config

import (
	"strings"
	"testing"
)

func TestCheckLibvirtURI(t *testing.T) {
	tests := []struct {
		uri     string
		wantErr string // "" accepts
	}{
		{"auto", ""},
		{"qemu:///system", ""},
		{"qemu+unix:///system", ""},
		{"qemu:///system?socket=/run/host/libvirt/libvirt-sock", ""},
		{"qemu+unix:///system?socket=/run/host/libvirt/virtqemud-sock", ""},
		{"qemu:///embed?root=/var/lib/node-agent/libvirt", ""},

		{"", "empty"},
		{"qemu+ext:///system?command=/bin/sh", "transport or driver qemu+ext is not accepted"},
		{"qemu+ssh://root@host-2/system", "only a local connection"},
		{"qemu+libssh2://host-2/system", "only a local connection"},
		{"qemu+tcp://10.0.0.2/system", "only a local connection"},
		{"qemu+tls://host-2/system", "only a local connection"},
		{"test:///default", "transport or driver test is not accepted"},
		{"lxc:///system", "transport or driver lxc is not accepted"},
		{"qemu:///session", "the path must be /system"},
		{"qemu+unix:///embed?root=/x", "the path must be /system"},
		{"qemu:///embed", "parameter root is required"},
		{"qemu:///embed?root=relative", "must be an absolute, clean path"},
		{"qemu:///embed?root=/a/../etc", "must be an absolute, clean path"},
		{"qemu:///embed?root=/a&root=/b", "given 2 times"},
		{"qemu:///system?socket=/s&no_verify=1", `parameter "no_verify" is not accepted`},
		{"qemu:///system?command=/bin/sh", `parameter "command" is not accepted`},
		{"qemu:///system#x", "only a local connection"},
		{"qemu:system", "only a local connection"},
		{"qemu:///system?%zz", "its query does not parse"},
		{"%", "not a URI"},
	}
	for _, tt := range tests {
		err := CheckLibvirtURI(tt.uri)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q refused: %v", tt.uri, err)
		case tt.wantErr != "" && err == nil:
			t.Errorf("%q accepted, want an error with %q", tt.uri, tt.wantErr)
		case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
			t.Errorf("%q: error %q, want it to contain %q", tt.uri, err, tt.wantErr)
		case err != nil && !strings.Contains(err.Error(), "accepted: "+libvirtURIForms):
			t.Errorf("%q: error %q does not say what is accepted", tt.uri, err)
		}
	}
}
