package watch

// MaxLibraries bounds the distinct libraries a collector counts; longer
// names are cut at maxLibrary bytes.
const (
	MaxLibraries = 16
	maxLibrary   = 200
)

// LibraryCount is one library the job's processes said they watch, and
// how many said it.
type LibraryCount struct {
	Library   string `json:"library"`
	Processes int64  `json:"processes"`
}

// countLibrary counts one admitted process's library ("" for a sender that
// names none); past MaxLibraries distinct names, the rest count as one.
func (s *Server) countLibrary(lib string) {
	if lib == "" {
		return
	}
	if len(lib) > maxLibrary {
		lib = lib[:maxLibrary]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.libraries {
		if s.libraries[i].Library == lib {
			s.libraries[i].Processes++
			return
		}
	}
	if len(s.libraries) >= MaxLibraries-1 {
		lib = "others"
		for i := range s.libraries {
			if s.libraries[i].Library == lib {
				s.libraries[i].Processes++
				return
			}
		}
	}
	s.libraries = append(s.libraries, LibraryCount{Library: lib, Processes: 1})
}
