package nomadapi

// AllocsBackend describes and controls allocations: status, logs, exec,
// the alloc dir, stop/restart/signal.
type AllocsBackend interface{}

func (s *Server) allocRoutes() []route { return nil }
