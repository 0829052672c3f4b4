package main

// POST/GET/DELETE /api/session: the vCenter 7.0+ REST login (vSphere Automation API, CIS Session
// create: POST https://{api_host}/api/session with basic authentication, "201 Created" and the session
// identifier as a JSON string, sent back in the vmware-api-session-id header; delete: 204). The vAPI
// simulator of govmomi v0.52.0 serves only the older /rest/com/vmware/cis/session (answering
// {"value": id}), so these are mapped onto it: the session store and its login check stay upstream's.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
)

const legacySessionPath = "/rest/com/vmware/cis/session"

type apiSession struct {
	front *namespaceFront // its vapiHandler() finds the vAPI simulator
}

func (s *apiSession) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := r.Clone(r.Context())
	req.URL.Path = legacySessionPath
	req.RequestURI = legacySessionPath
	req.Header.Set("vmware-use-header-authn", "true")
	rec := httptest.NewRecorder()
	s.front.vapiHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
		return
	}
	var out struct {
		Value json.RawMessage `json:"value"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	switch r.Method {
	case http.MethodPost:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(out.Value)
	case http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out.Value)
	}
}
