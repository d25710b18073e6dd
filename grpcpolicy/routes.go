package grpcpolicy

import (
	"fmt"
	"strings"

	"github.com/watertight/watertight/policy"
)

// routes picks the policy of a method: its own, its service's, or the
// default. It is immutable once built.
type routes struct {
	def     policy.Policy
	methods map[string]policy.Policy // nil if none
}

// newRoutes validates and copies the Policy and Methods fields of a config;
// side is "ClientConfig" or "ServerConfig", for error messages.
func newRoutes(side string, def policy.Policy, methods map[string]policy.Policy) (routes, error) {
	r := routes{def: def}
	if def == nil && len(methods) == 0 {
		return r, fmt.Errorf("grpcpolicy: %s.Policy is nil and %s.Methods is empty: nothing to guard", side, side)
	}
	if len(methods) > 0 {
		r.methods = make(map[string]policy.Policy, len(methods))
		for k, p := range methods {
			if !validRoute(k) {
				return r, fmt.Errorf("grpcpolicy: %s.Methods key %q is neither \"/pkg.Service/Method\" nor \"/pkg.Service\"", side, k)
			}
			if p == nil {
				return r, fmt.Errorf("grpcpolicy: %s.Methods[%q] is nil", side, k)
			}
			r.methods[k] = p
		}
	}
	return r, nil
}

// validRoute reports whether k is "/service" or "/service/method", with
// non-empty parts.
func validRoute(k string) bool {
	if len(k) < 2 || k[0] != '/' {
		return false
	}
	rest := k[1:]
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return true
	}
	return i > 0 && i < len(rest)-1 && strings.IndexByte(rest[i+1:], '/') < 0
}

// lookup returns the policy for the full method name ("/pkg.Service/Method"),
// or nil if the call is not guarded.
func (r *routes) lookup(method string) policy.Policy {
	if r.methods != nil {
		if p, ok := r.methods[method]; ok {
			return p
		}
		if i := strings.LastIndexByte(method, '/'); i > 0 {
			if p, ok := r.methods[method[:i]]; ok {
				return p
			}
		}
	}
	return r.def
}
