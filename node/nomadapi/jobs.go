package nomadapi

// JobsBackend runs and describes jobs, evaluations and deployments.
type JobsBackend interface{}

func (s *Server) jobRoutes() []route { return nil }
