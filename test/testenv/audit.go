package testenv

import (
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event (one line of
// kube-apiserver's JSON audit log) that the tests and the benchmark read.
type AuditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string              `json:"username"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	// ImpersonatedUser is set when the request impersonated someone, such
	// as the agent acting as its node (pkg/podaccess).
	ImpersonatedUser *struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"impersonatedUser"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	Received metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// Code is the response's HTTP status code, 0 when the event has none (stage
// RequestReceived).
func (e AuditEvent) Code() int {
	if e.ResponseStatus == nil {
		return 0
	}
	return e.ResponseStatus.Code
}

// UserAuditPolicy is an audit policy that records every request of user at
// the Metadata level (with the user's extra info, such as the node name of a
// pod-bound token), once complete, and nothing else.
func UserAuditPolicy(user string) string {
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["` + user + `"]
  - level: None
`
}

// AuditLog writes policy into dir and returns the kube-apiserver arguments
// (for Options.APIServerArgs) that log by it, as JSON, to the returned file.
func AuditLog(dir, policy string) (args []string, logPath string, err error) {
	policyFile := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		return nil, "", err
	}
	logPath = filepath.Join(dir, "audit.log")
	return []string{"--audit-policy-file=" + policyFile, "--audit-log-path=" + logPath, "--audit-log-format=json"}, logPath, nil
}
