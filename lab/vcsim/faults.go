package main

// Transport faults in the middle of a session, armed by tests while a client is logged in: a proxy
// or load balancer in front of vCenter answering a SOAP call with HTTP 500 and an HTML page, or a
// reply cut short when a connection drops. pyVmomi parses any 200 or 500 answer as SOAP
// (pyVmomi/SoapAdapter.py SoapStubAdapter.InvokeMethod), so both reach the client as
// xml.parsers.expat.ExpatError; the method itself either did not run ("http500") or did
// ("http500_after", "truncate").
//
// Control endpoint, loopback only like the rest: POST /gpuops/faults with the header
// X-Gpuops-Fault-Token: <run-dir>/fault-token and a JSON body
//   {"method": "ReconfigVM_Task", "mode": "truncate", "skip": 0, "times": 1, "contains": "VmiopBackingInfo"}
// arms a rule: the next `times` calls of `method` (whose request contains `contains`, when given) after `skip`
// matching ones get the fault. GET lists the rules with what they fired, DELETE clears them. The SOAP endpoint
// is otherwise untouched.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
)

type faultRule struct {
	Method   string `json:"method"`
	Mode     string `json:"mode"`
	Contains string `json:"contains,omitempty"`
	Skip     int    `json:"skip"`
	Times    int    `json:"times"`
	Fired    int    `json:"fired"`
}

var faultModes = map[string]bool{"http500": true, "http500_after": true, "truncate": true}

type faultInjector struct {
	next  http.Handler
	token string
	mu    sync.Mutex
	rules []*faultRule
}

func newFaultToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// soapMethodRE finds the first element inside the SOAP Body: the method called.
var soapMethodRE = regexp.MustCompile(`<(?:[A-Za-z0-9_]+:)?Body[^>]*>\s*<(?:[A-Za-z0-9_]+:)?([A-Za-z0-9_]+)`)

func (f *faultInjector) control(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Gpuops-Fault-Token") != f.token {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		rule := &faultRule{Times: 1}
		if err := json.NewDecoder(r.Body).Decode(rule); err != nil || rule.Method == "" || !faultModes[rule.Mode] || rule.Times < 1 || rule.Skip < 0 {
			http.Error(w, "want {method, mode: http500|http500_after|truncate, skip >= 0, times >= 1}", http.StatusBadRequest)
			return
		}
		f.rules = append(f.rules, rule)
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		f.rules = nil
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.rules)
	}
}

// match consumes one call of method and returns the mode to apply, "" for none.
func (f *faultInjector) match(method string, body []byte) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, rule := range f.rules {
		// pyVmomi sends some methods under their lower-case wire names (fetchSoftwarePackages)
		if !strings.EqualFold(rule.Method, method) || rule.Fired >= rule.Times || (rule.Contains != "" && !bytes.Contains(body, []byte(rule.Contains))) {
			continue
		}
		if rule.Skip > 0 {
			rule.Skip--
			return ""
		}
		rule.Fired++
		return rule.Mode
	}
	return ""
}

func htmlError(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusInternalServerError)
	// A proxy's error page as nginx writes it: HTML, not XML (<hr> is never closed).
	_, _ = io.WriteString(w, "<html>\r\n<head><title>500 Internal Server Error</title></head>\r\n<body>\r\n"+
		"<center><h1>500 Internal Server Error</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
}

func (f *faultInjector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/gpuops/faults" {
		f.control(w, r)
		return
	}
	if r.URL.Path != "/sdk" || r.Method != http.MethodPost {
		f.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	mode := ""
	if m := soapMethodRE.FindSubmatch(body); m != nil {
		mode = f.match(string(m[1]), body)
	}
	switch mode {
	case "":
		f.next.ServeHTTP(w, r)
	case "http500":
		htmlError(w)
	default:
		rec := httptest.NewRecorder()
		f.next.ServeHTTP(rec, r)
		if mode == "http500_after" {
			htmlError(w)
			return
		}
		// The first half of the reply, then the connection ends: no Content-Length, so the client reads
		// to the end and parses a document that stops in the middle.
		for k, v := range rec.Header() {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.Header().Set("Connection", "close")
		w.WriteHeader(rec.Code)
		out := rec.Body.Bytes()
		_, _ = w.Write(out[:len(out)/2])
	}
}
