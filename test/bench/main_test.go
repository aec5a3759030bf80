package bench

import (
	"os"
	"testing"

	"github.com/node-agent/node-agent/test/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveAgentBuild()
	os.Exit(code)
}
