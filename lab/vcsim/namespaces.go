package main

// vSphere with Tanzu VM classes and namespaces over the vCenter REST API. govmomi's
// vapi/namespace/simulator (v0.52.0) serves /api/vcenter/namespace-management/virtual-machine-classes
// and /api/vcenter/namespaces/instances from maps, without the rules vCenter applies: it accepts any
// vGPU profile, overwrites an existing id on create, keeps no link from a class to the namespaces that
// may use it, replaces every field on PATCH, and answers a namespace PATCH with 200 and then a 404 body.
// This front runs the vCenter rules and then hands the request to the upstream handler, which keeps the
// data. It sits behind the vAPI simulator's session check: it is registered through the vAPI handler's
// HandleFunc (vapi/simulator/simulator.go handler.HandleFunc), so requests without a session get 401.
//
// The rules (vSphere Automation API reference, developer.broadcom.com/xapis/vsphere-automation-api):
//   - NamespaceManagement_VirtualMachineClasses_CreateSpec.id: "alphanumeric (a-z and 0-9) string and with
//     maximum length of 63 characters and with the '-' character allowed anywhere except the first or
//     last character. This name is unique in this vCenter server" -> 400 INVALID_ARGUMENT, 400
//     ALREADY_EXISTS.
//   - vGPU devices (devices.vgpu_devices before 8.0.2, VirtualPCIPassthrough devices with a VMIOP backing
//     in config_spec from 8.0.2): a profile must be one the Supervisor's hosts offer (the vSphere Client
//     lists only those when a vGPU is added to a VM class) -> 400 INVALID_ARGUMENT naming the profile.
//   - VirtualMachineClasses Info: memory_MB, config_status (READY), namespaces ("Set of Namespace
//     identifiers associated with this VM class"), vms.
//   - VirtualMachineClasses.update (PATCH): the UpdateSpec fields are optional; unset ones stay.
//   - VirtualMachineClasses.delete: 404 NOT_FOUND; 400 "ResourceInUse" (a class still associated with a
//     namespace here).
//   - Namespaces Instances create: the cluster must have a Supervisor (here: fixture clusters.<name>.
//     supervisor); the namespace name is a DNS label and unique (400 ALREADY_EXISTS);
//     vm_service_spec.vm_classes must name existing classes (400 INVALID_ARGUMENT).
//   - Namespaces Instances update (PATCH): "vm_service_spec: ... If unset, the VM service spec is
//     unchanged"; 404 NOT_FOUND for an unknown namespace; success is 204 No Content.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/vmware/govmomi/simulator"
)

const (
	vmClassesPath  = "/api/vcenter/namespace-management/virtual-machine-classes"
	namespacesPath = "/api/vcenter/namespaces/instances"
)

var dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

type muxHandleFunc interface {
	HandleFunc(string, func(http.ResponseWriter, *http.Request))
}

type namespaceFront struct {
	mux      *http.ServeMux
	mu       sync.Mutex
	vapi     http.Handler
	upstream map[string]func(http.ResponseWriter, *http.Request)
	// supervisor clusters by name (fixture clusters.<name>.supervisor)
	supervisor map[string]bool
}

func newNamespaceFront(mux *http.ServeMux, f *Fixture) *namespaceFront {
	front := &namespaceFront{mux: mux, upstream: map[string]func(http.ResponseWriter, *http.Request){}, supervisor: map[string]bool{}}
	for name, spec := range f.Clusters {
		if spec.Supervisor {
			front.supervisor[name] = true
		}
	}
	for _, p := range []string{vmClassesPath, vmClassesPath + "/", namespacesPath, namespacesPath + "/"} {
		mux.Handle(p, front)
	}
	mux.Handle("/api/session", &apiSession{front: front})
	return front
}

// vapiHandler is the vAPI simulator's handler, registered at /api/ by its endpoint.
func (f *namespaceFront) vapiHandler() http.Handler {
	if f.vapi == nil {
		h, _ := f.mux.Handler(&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/api/gpuops-vapi-lookup"}})
		f.vapi = h
	}
	return f.vapi
}

func (f *namespaceFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.vapiHandler().ServeHTTP(w, r)
}

// HandleFunc receives the namespace simulator's handlers (simulator.Service hands each endpoint pattern
// to the handler that serves it) and registers our rules in front of them with the vAPI handler.
func (f *namespaceFront) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	f.upstream[pattern] = h
	rules := f.namespaces
	if strings.HasPrefix(pattern, vmClassesPath) {
		rules = f.classes
	}
	if mh, ok := f.vapiHandler().(muxHandleFunc); ok {
		mh.HandleFunc(pattern, rules)
	}
}

// ---- helpers --------------------------------------------------------------------------------------------

func apiErr(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]interface{}{
		"error_type": kind,
		"messages":   []map[string]interface{}{{"id": "com.vmware.vcenter.namespace." + strings.ToLower(kind), "default_message": msg, "args": []string{}}},
	})
}

// call runs an upstream handler on a synthetic request and returns its status and body.
func (f *namespaceFront) call(pattern, method, path string, body []byte) (int, []byte) {
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	f.upstream[pattern](rec, r)
	return rec.Code, rec.Body.Bytes()
}

func (f *namespaceFront) getClass(id string) (map[string]interface{}, bool) {
	code, body := f.call(vmClassesPath+"/", http.MethodGet, vmClassesPath+"/"+id, nil)
	if code != http.StatusOK {
		return nil, false
	}
	var info map[string]interface{}
	return info, json.Unmarshal(body, &info) == nil
}

func (f *namespaceFront) classIDs() []string {
	_, body := f.call(vmClassesPath, http.MethodGet, vmClassesPath, nil)
	var list []map[string]interface{}
	_ = json.Unmarshal(body, &list)
	var ids []string
	for _, c := range list {
		ids = append(ids, fmt.Sprint(c["id"]))
	}
	sort.Strings(ids)
	return ids
}

// namespaceClasses: {namespace: its vm_service_spec.vm_classes}.
func (f *namespaceFront) namespaceClasses() map[string][]string {
	_, body := f.call(namespacesPath, http.MethodGet, namespacesPath, nil)
	var list []map[string]interface{}
	_ = json.Unmarshal(body, &list)
	out := map[string][]string{}
	for _, s := range list {
		name := fmt.Sprint(s["namespace"])
		_, info := f.call(namespacesPath+"/", http.MethodGet, namespacesPath+"/"+name, nil)
		var ns struct {
			VmServiceSpec struct {
				VmClasses []string `json:"vm_classes"`
			} `json:"vm_service_spec"`
		}
		_ = json.Unmarshal(info, &ns)
		out[name] = ns.VmServiceSpec.VmClasses
	}
	return out
}

func (f *namespaceFront) boundTo(class string) []string {
	var out []string
	for ns, classes := range f.namespaceClasses() {
		for _, c := range classes {
			if c == class {
				out = append(out, ns)
			}
		}
	}
	sort.Strings(out)
	return out
}

// supervisorOffer: the vGPU profiles the hosts of the Supervisor clusters offer.
func (f *namespaceFront) supervisorOffer() map[string]bool {
	out := map[string]bool{}
	for _, e := range registry.All("ClusterComputeResource") {
		c := e.(*simulator.ClusterComputeResource)
		if !f.supervisor[c.Name] {
			continue
		}
		for _, ref := range c.Host {
			if h, ok := registry.Get(ref).(*simulator.HostSystem); ok && h.Config != nil {
				for _, p := range h.Config.SharedPassthruGpuTypes {
					out[p] = true
				}
			}
		}
	}
	return out
}

// classProfiles: the vGPU profiles of a class spec, from devices.vgpu_devices and config_spec.
func classProfiles(spec map[string]interface{}) []string {
	var out []string
	if dev, ok := spec["devices"].(map[string]interface{}); ok {
		if list, ok := dev["vgpu_devices"].([]interface{}); ok {
			for _, d := range list {
				if m, ok := d.(map[string]interface{}); ok {
					out = append(out, fmt.Sprint(m["profile_name"]))
				}
			}
		}
	}
	if cs, ok := spec["config_spec"].(map[string]interface{}); ok {
		if changes, ok := cs["deviceChange"].([]interface{}); ok {
			for _, c := range changes {
				ch, _ := c.(map[string]interface{})
				dev, _ := ch["device"].(map[string]interface{})
				backing, _ := dev["backing"].(map[string]interface{})
				if fmt.Sprint(backing["_typeName"]) == "VirtualPCIPassthroughVmiopBackingInfo" {
					out = append(out, fmt.Sprint(backing["vgpu"]))
				}
			}
		}
	}
	return out
}

func (f *namespaceFront) badProfiles(spec map[string]interface{}) string {
	offer := f.supervisorOffer()
	var bad []string
	for _, p := range classProfiles(spec) {
		if !offer[p] {
			bad = append(bad, p)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("vGPU profile(s) %s not offered by any host of the Supervisor", strings.Join(bad, ", "))
}

func decodeMap(r *http.Request) (map[string]interface{}, []byte, error) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return nil, nil, err
	}
	var m map[string]interface{}
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		return nil, nil, err
	}
	return m, buf.Bytes(), nil
}

// info rewrites an upstream class Info the way vCenter reports it.
func (f *namespaceFront) info(c map[string]interface{}, bound map[string][]string) map[string]interface{} {
	if v, ok := c["memory_mb"]; ok {
		c["memory_MB"] = v
		delete(c, "memory_mb")
	}
	c["config_status"] = "READY"
	namespaces := []string{}
	id := fmt.Sprint(c["id"])
	for ns, classes := range bound {
		for _, cl := range classes {
			if cl == id {
				namespaces = append(namespaces, ns)
			}
		}
	}
	sort.Strings(namespaces)
	c["namespaces"] = namespaces
	if c["vms"] == nil {
		c["vms"] = []string{}
	}
	return c
}

func writeJSON(w http.ResponseWriter, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// ---- VM classes -----------------------------------------------------------------------------------------

func (f *namespaceFront) classes(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := strings.Trim(strings.TrimPrefix(r.URL.Path, vmClassesPath), "/")
	switch {
	case r.Method == http.MethodGet && id == "":
		bound := f.namespaceClasses()
		out := []map[string]interface{}{}
		for _, cid := range f.classIDs() {
			if c, ok := f.getClass(cid); ok {
				out = append(out, f.info(c, bound))
			}
		}
		writeJSON(w, out)
	case r.Method == http.MethodGet:
		c, ok := f.getClass(id)
		if !ok {
			apiErr(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("VM class %s not found", id))
			return
		}
		writeJSON(w, f.info(c, f.namespaceClasses()))
	case r.Method == http.MethodPost && id == "":
		spec, raw, err := decodeMap(r)
		if err != nil {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", "body is not a CreateSpec: "+err.Error())
			return
		}
		cid := fmt.Sprint(spec["id"])
		if !dnsLabelRE.MatchString(cid) {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("VM class id %q is not a DNS label", cid))
			return
		}
		if _, exists := f.getClass(cid); exists {
			apiErr(w, http.StatusBadRequest, "ALREADY_EXISTS", fmt.Sprintf("VM class %s already exists", cid))
			return
		}
		if msg := f.badProfiles(spec); msg != "" {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("VM class %s: %s", cid, msg))
			return
		}
		code, body := f.call(vmClassesPath, http.MethodPost, vmClassesPath, raw)
		if code != http.StatusOK {
			w.WriteHeader(code)
			_, _ = w.Write(body)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPatch && id != "":
		cur, ok := f.getClass(id)
		if !ok {
			apiErr(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("VM class %s not found", id))
			return
		}
		patch, _, err := decodeMap(r)
		if err != nil {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", "body is not an UpdateSpec: "+err.Error())
			return
		}
		merged := map[string]interface{}{"id": id, "cpu_count": cur["cpu_count"], "memory_MB": cur["memory_mb"],
			"cpu_reservation": cur["cpu_reservation"], "memory_reservation": cur["memory_reservation"],
			"devices": cur["devices"], "config_spec": cur["config_spec"]}
		for k, v := range patch {
			merged[k] = v
		}
		if msg := f.badProfiles(merged); msg != "" {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("VM class %s: %s", id, msg))
			return
		}
		raw, _ := json.Marshal(merged)
		f.call(vmClassesPath+"/", http.MethodPatch, vmClassesPath+"/"+id, raw)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodDelete && id != "":
		if _, ok := f.getClass(id); !ok {
			apiErr(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("VM class %s not found", id))
			return
		}
		if ns := f.boundTo(id); len(ns) > 0 {
			apiErr(w, http.StatusBadRequest, "RESOURCE_IN_USE", fmt.Sprintf("VM class %s is in use by namespace(s) %s",
				id, strings.Join(ns, ", ")))
			return
		}
		f.call(vmClassesPath+"/", http.MethodDelete, vmClassesPath+"/"+id, nil)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// ---- namespaces -----------------------------------------------------------------------------------------

func (f *namespaceFront) checkClasses(spec map[string]interface{}) string {
	vs, _ := spec["vm_service_spec"].(map[string]interface{})
	list, _ := vs["vm_classes"].([]interface{})
	known := map[string]bool{}
	for _, id := range f.classIDs() {
		known[id] = true
	}
	var missing []string
	for _, c := range list {
		if !known[fmt.Sprint(c)] {
			missing = append(missing, fmt.Sprint(c))
		}
	}
	if len(missing) > 0 {
		return "VM class(es) not found: " + strings.Join(missing, ", ")
	}
	return ""
}

func (f *namespaceFront) clusterNameOf(id string) string {
	for _, e := range registry.All("ClusterComputeResource") {
		c := e.(*simulator.ClusterComputeResource)
		if c.Self.Value == id || c.Name == id {
			return c.Name
		}
	}
	return ""
}

func (f *namespaceFront) namespaces(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, namespacesPath), "/")
	name, action := rest, ""
	if i := strings.Index(rest, "/"); i >= 0 {
		name, action = rest[:i], rest[i+1:]
	}
	pattern := namespacesPath
	if strings.HasPrefix(r.URL.Path, namespacesPath+"/") {
		pattern = namespacesPath + "/"
	}
	exists := func(ns string) bool {
		code, _ := f.call(namespacesPath+"/", http.MethodGet, namespacesPath+"/"+ns, nil)
		return code == http.StatusOK
	}
	switch {
	case r.Method == http.MethodPost && name == "" && action == "":
		spec, raw, err := decodeMap(r)
		if err != nil {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", "body is not a CreateSpec: "+err.Error())
			return
		}
		ns := fmt.Sprint(spec["namespace"])
		if !dnsLabelRE.MatchString(ns) {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("namespace %q is not a DNS label", ns))
			return
		}
		if exists(ns) {
			apiErr(w, http.StatusBadRequest, "ALREADY_EXISTS", fmt.Sprintf("namespace %s already exists", ns))
			return
		}
		cluster := f.clusterNameOf(fmt.Sprint(spec["cluster"]))
		if !f.supervisor[cluster] {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("cluster %v has no Supervisor", spec["cluster"]))
			return
		}
		if msg := f.checkClasses(spec); msg != "" {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("namespace %s: %s", ns, msg))
			return
		}
		f.call(namespacesPath, http.MethodPost, namespacesPath, raw)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPatch && name != "" && action == "":
		if !exists(name) {
			apiErr(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("namespace %s not found", name))
			return
		}
		spec, raw, err := decodeMap(r)
		if err != nil {
			apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", "body is not an UpdateSpec: "+err.Error())
			return
		}
		if _, ok := spec["vm_service_spec"]; ok {
			if msg := f.checkClasses(spec); msg != "" {
				apiErr(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("namespace %s: %s", name, msg))
				return
			}
			// Upstream answers 200 and then a 404 body for a PATCH that worked: its answer is not passed on.
			f.call(namespacesPath+"/", http.MethodPatch, namespacesPath+"/"+name, raw)
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && name != "" && action == "":
		if !exists(name) {
			apiErr(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("namespace %s not found", name))
			return
		}
		f.upstream[pattern](w, r)
	case r.Method == http.MethodDelete && name != "":
		if !exists(name) {
			apiErr(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("namespace %s not found", name))
			return
		}
		f.call(namespacesPath+"/", http.MethodDelete, namespacesPath+"/"+name, nil)
		w.WriteHeader(http.StatusNoContent)
	default:
		f.upstream[pattern](w, r)
	}
}

// NamespaceSpec seeds a namespace (fixture "namespaces"): one a platform team created before us.
type NamespaceSpec struct {
	Name      string   `json:"name"`
	Cluster   string   `json:"cluster"`
	VMClasses []string `json:"vm_classes,omitempty"`
}

// seed creates the fixture's namespaces through the upstream handler (no session needed in-process).
func (f *namespaceFront) seed(list []NamespaceSpec) error {
	for _, ns := range list {
		var cluster *simulator.ClusterComputeResource
		for _, e := range registry.All("ClusterComputeResource") {
			if c := e.(*simulator.ClusterComputeResource); c.Name == ns.Cluster {
				cluster = c
			}
		}
		if cluster == nil || !f.supervisor[ns.Cluster] {
			return fmt.Errorf("namespace %s: cluster %q is not a Supervisor cluster (fixture clusters.<name>.supervisor)", ns.Name, ns.Cluster)
		}
		if !dnsLabelRE.MatchString(ns.Name) {
			return fmt.Errorf("namespace %q is not a DNS label", ns.Name)
		}
		body, _ := json.Marshal(map[string]interface{}{"cluster": cluster.Self.Value, "namespace": ns.Name,
			"vm_service_spec": map[string]interface{}{"vm_classes": ns.VMClasses}})
		if h := f.upstream[namespacesPath]; h == nil {
			return fmt.Errorf("the namespace simulator is not registered")
		}
		if code, out := f.call(namespacesPath, http.MethodPost, namespacesPath, body); code != http.StatusOK {
			return fmt.Errorf("namespace %s: %d %s", ns.Name, code, out)
		}
	}
	return nil
}
