package hostcpu

import "testing"

func TestEmbedRoot(t *testing.T) {
	tests := []struct{ uri, state, want string }{
		{"auto", "/var/lib/node-agent", "/var/lib/node-agent/libvirt"},
		{"", "/s", "/s/libvirt"},
		{"auto", "", ""},
		{"qemu:///embed?root=/tmp/x", "/s", "/tmp/x"},
		{"qemu:///system", "/s", ""},
		{"test:///default", "/s", ""},
		{"%zz", "/s", ""},
	}
	for _, tt := range tests {
		if got := EmbedRoot(tt.uri, tt.state); got != tt.want {
			t.Errorf("EmbedRoot(%q, %q) = %q, want %q", tt.uri, tt.state, got, tt.want)
		}
	}
}
