package libvirt

// A minimal binding to the eight libvirt functions discovery needs, loaded
// with dlopen(3) at the first Dial. libvirt.org/go/libvirt cannot do this: its
// package init calls virSetErrorFunc, so any process that links it, the
// daemon included, maps libvirt.so.0 and its dependencies at start. Here
// nothing of libvirt is loaded until a discovery child dials.
//
// libvirt keeps its last error per thread, so each C wrapper makes the call
// and reads the error on the same thread, before returning to Go.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef void *nav_conn;
typedef void (*nav_error_func)(void *, void *);

static void *nav_lib;
static nav_conn (*p_virConnectOpen)(const char *);
static int (*p_virConnectClose)(nav_conn);
static char *(*p_virConnectGetDomainCapabilities)(nav_conn, const char *, const char *, const char *, const char *, unsigned int);
static char *(*p_virConnectGetCapabilities)(nav_conn);
static char *(*p_virConnectBaselineHypervisorCPU)(nav_conn, const char *, const char *, const char *, const char *, const char **, unsigned int, unsigned int);
static int (*p_virEventRegisterDefaultImpl)(void);
static int (*p_virEventRunDefaultImpl)(void);
static const char *(*p_virGetLastErrorMessage)(void);
static void (*p_virSetErrorFunc)(void *, nav_error_func);

static void nav_ignore_error(void *u, void *e) {}

// nav_load opens libvirt.so.0 and resolves the functions. It returns NULL or
// a static message.
static const char *nav_load(void) {
	if (nav_lib) return NULL;
	void *h = dlopen("libvirt.so.0", RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
#define NAV_SYM(name) if (!(*(void **)(&p_##name) = dlsym(h, #name))) return "libvirt.so.0 lacks " #name;
	NAV_SYM(virConnectOpen)
	NAV_SYM(virConnectClose)
	NAV_SYM(virConnectGetDomainCapabilities)
	NAV_SYM(virConnectGetCapabilities)
	NAV_SYM(virConnectBaselineHypervisorCPU)
	NAV_SYM(virEventRegisterDefaultImpl)
	NAV_SYM(virEventRunDefaultImpl)
	NAV_SYM(virGetLastErrorMessage)
	NAV_SYM(virSetErrorFunc)
#undef NAV_SYM
	// Without a handler libvirt prints every error to stderr as well.
	p_virSetErrorFunc(NULL, nav_ignore_error);
	nav_lib = h;
	return NULL;
}

static char *nav_errmsg(void) {
	const char *m = p_virGetLastErrorMessage();
	return strdup(m ? m : "unknown libvirt error");
}

static int nav_event_register(char **err) {
	int r = p_virEventRegisterDefaultImpl();
	if (r < 0) *err = nav_errmsg();
	return r;
}

static int nav_event_run(char **err) {
	int r = p_virEventRunDefaultImpl();
	if (r < 0) *err = nav_errmsg();
	return r;
}

static nav_conn nav_open(const char *uri, char **err) {
	nav_conn c = p_virConnectOpen(uri);
	if (!c) *err = nav_errmsg();
	return c;
}

static int nav_close(nav_conn c, char **err) {
	int r = p_virConnectClose(c);
	if (r < 0) *err = nav_errmsg();
	return r;
}

static char *nav_domcaps(nav_conn c, const char *virttype, char **err) {
	char *s = p_virConnectGetDomainCapabilities(c, NULL, NULL, NULL, virttype, 0);
	if (!s) *err = nav_errmsg();
	return s;
}

static char *nav_caps(nav_conn c, char **err) {
	char *s = p_virConnectGetCapabilities(c);
	if (!s) *err = nav_errmsg();
	return s;
}

// VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES is 1 << 0 in libvirt-host.h.
static char *nav_expand(nav_conn c, const char *virttype, const char *cpu, char **err) {
	const char *cpus[1] = {cpu};
	char *s = p_virConnectBaselineHypervisorCPU(c, NULL, NULL, NULL, virttype, cpus, 1, 1);
	if (!s) *err = nav_errmsg();
	return s;
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// load opens libvirt.so.0; later calls are free.
func load() error {
	if msg := C.nav_load(); msg != nil {
		return errors.New(C.GoString(msg) + "; is libvirt (libvirt.so.0, Debian package libvirt0) installed?")
	}
	return nil
}

// cError turns a message the wrappers allocated into an error, and frees it.
func cError(msg *C.char) error {
	if msg == nil {
		return errors.New("unknown libvirt error")
	}
	defer C.free(unsafe.Pointer(msg))
	return errors.New(C.GoString(msg))
}

// cString returns s, allocated by libvirt, as a Go string, and frees it.
func cString(s *C.char) string {
	defer C.free(unsafe.Pointer(s))
	return C.GoString(s)
}

func eventRegisterDefaultImpl() error {
	var msg *C.char
	if C.nav_event_register(&msg) < 0 {
		return cError(msg)
	}
	return nil
}

func eventRunDefaultImpl() error {
	var msg *C.char
	if C.nav_event_run(&msg) < 0 {
		return cError(msg)
	}
	return nil
}

// conn is an open virConnectPtr.
type conn struct{ p C.nav_conn }

func openConn(uri string) (*conn, error) {
	curi := C.CString(uri)
	defer C.free(unsafe.Pointer(curi))
	var msg *C.char
	p := C.nav_open(curi, &msg)
	if p == nil {
		return nil, cError(msg)
	}
	return &conn{p: p}, nil
}

func (c *conn) close() error {
	var msg *C.char
	if C.nav_close(c.p, &msg) < 0 {
		return cError(msg)
	}
	return nil
}

func (c *conn) domainCapabilities(virtType string) (string, error) {
	vt := C.CString(virtType)
	defer C.free(unsafe.Pointer(vt))
	var msg *C.char
	s := C.nav_domcaps(c.p, vt, &msg)
	if s == nil {
		return "", cError(msg)
	}
	return cString(s), nil
}

func (c *conn) capabilities() (string, error) {
	var msg *C.char
	s := C.nav_caps(c.p, &msg)
	if s == nil {
		return "", cError(msg)
	}
	return cString(s), nil
}

func (c *conn) expandCPU(virtType, cpuXML string) (string, error) {
	vt := C.CString(virtType)
	defer C.free(unsafe.Pointer(vt))
	cpu := C.CString(cpuXML)
	defer C.free(unsafe.Pointer(cpu))
	var msg *C.char
	s := C.nav_expand(c.p, vt, cpu, &msg)
	if s == nil {
		return "", cError(msg)
	}
	return cString(s), nil
}
