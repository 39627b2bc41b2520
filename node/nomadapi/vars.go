package nomadapi

// VarsBackend stores Nomad Variables.
type VarsBackend interface{}

func (s *Server) varRoutes() []route { return nil }
