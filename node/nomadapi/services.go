package nomadapi

import (
	"net/http"
	"slices"

	napi "github.com/hashicorp/nomad/api"

	"github.com/berth/berth/api"
)

// Nomad's native service catalog: berth's registrations (provider
// "nomad"), as `nomad service list|info` read them.

func (s *Server) serviceRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/services", s.handleServices},
		{http.MethodGet, "/v1/service/{name}", s.handleService},
	}
}

func (s *Server) handleServices(w http.ResponseWriter, r *http.Request) {
	l, err := s.b.Services(r.Context(), "")
	if err != nil {
		writeErr(w, err)
		return
	}
	// One stub per namespace, its services by name with their tags.
	out := []*napi.ServiceRegistrationListStub{}
	byNS := map[string]*napi.ServiceRegistrationListStub{}
	byName := map[[2]string]*napi.ServiceRegistrationStub{}
	var index uint64
	for _, svc := range l {
		ns := namespace(svc.Namespace)
		st := byNS[ns]
		if st == nil {
			st = &napi.ServiceRegistrationListStub{Namespace: ns}
			byNS[ns] = st
			out = append(out, st)
		}
		k := [2]string{ns, svc.ServiceName}
		ss := byName[k]
		if ss == nil {
			ss = &napi.ServiceRegistrationStub{ServiceName: svc.ServiceName, Tags: []string{}}
			byName[k] = ss
			st.Services = append(st.Services, ss)
		}
		for _, t := range svc.Tags {
			if !slices.Contains(ss.Tags, t) {
				ss.Tags = append(ss.Tags, t)
			}
		}
		index = max(index, uint64(svc.ModifiedAt.UnixNano()))
	}
	writeJSON(w, index, out)
}

func (s *Server) handleService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	l, err := s.b.Services(r.Context(), name)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := make([]*napi.ServiceRegistration, 0, len(l))
	var index uint64
	for _, svc := range l {
		out = append(out, serviceRegistration(svc))
		index = max(index, uint64(svc.ModifiedAt.UnixNano()))
	}
	// As Nomad's: an unknown service is an empty list, not a 404.
	writeJSON(w, index, out)
}

// serviceRegistration is Nomad's form of one registration.
func serviceRegistration(svc api.ServiceRegistration) *napi.ServiceRegistration {
	return &napi.ServiceRegistration{
		ID: svc.ID, ServiceName: svc.ServiceName, Namespace: namespace(svc.Namespace), NodeID: svc.NodeID,
		Datacenter: svc.Datacenter, JobID: svc.JobID, AllocID: svc.AllocID, Tags: svc.Tags,
		Address: svc.Address, Port: svc.Port,
		CreateIndex: uint64(max(svc.CreatedAt.UnixNano(), 1)), ModifyIndex: uint64(max(svc.ModifiedAt.UnixNano(), 1)),
	}
}
