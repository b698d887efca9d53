package api

import (
	"net/http"

	"layerfs.dev/layerfs/wire"
)

func (s *Server) getVersion(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.opts.Daemon.Version)
	return nil
}

func (s *Server) getDaemon(w http.ResponseWriter, r *http.Request) error {
	wss, err := s.workspaces.Workspaces(ctxOf(r))
	if err != nil {
		return err
	}
	st := s.opts.Daemon
	st.Started = s.started
	st.Workspaces = len(wss)
	st.Execs = s.RunningExecs()
	for _, ws := range wss {
		if ws.Network == wire.NetworkHost {
			st.HostNetwork = append(st.HostNetwork, ws.ID)
		}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *Server) stopDaemon(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Stop == nil {
		return unavailable("this server cannot be stopped through the API")
	}
	s.stopOnce.Do(func() { go s.opts.Stop() })
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (s *Server) listProjects(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.projects.Projects(ctxOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(ps))
	return nil
}

func (s *Server) createProject(w http.ResponseWriter, r *http.Request) error {
	var req wire.CreateProject
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	if err := hostPath("from_path", req.FromPath, false); err != nil {
		return err
	}
	if err := checkText("message", req.Message, 64<<10); err != nil {
		return err
	}
	p, err := s.projects.CreateProject(ctxOf(r), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, p)
	return nil
}

// projectParam validates the {p} path value.
func projectParam(r *http.Request) (string, error) {
	p := r.PathValue("p")
	return p, checkName("project", p)
}

func (s *Server) getProject(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	proj, err := s.projects.Project(ctxOf(r), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, proj)
	return nil
}

func (s *Server) listLayers(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	ls, err := s.projects.Layers(ctxOf(r), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(ls))
	return nil
}

func (s *Server) addLayer(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	var req wire.AddLayer
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkName("branch", req.Branch); err != nil {
		return err
	}
	l, err := s.projects.AddLayer(ctxOf(r), p, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, l)
	return nil
}

func (s *Server) listBranches(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	bs, err := s.branches.Branches(ctxOf(r), p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(bs))
	return nil
}

func (s *Server) forkBranch(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	var req wire.ForkBranch
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name); err != nil {
		return err
	}
	if err := checkRef("from", req.From); err != nil {
		return err
	}
	b, err := s.branches.ForkBranch(ctxOf(r), p, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, b)
	return nil
}

// branchParams validates {p} and {b}.
func branchParams(r *http.Request) (string, string, error) {
	p, err := projectParam(r)
	if err != nil {
		return "", "", err
	}
	b := r.PathValue("b")
	return p, b, checkName("branch", b)
}

func (s *Server) getBranch(w http.ResponseWriter, r *http.Request) error {
	p, b, err := branchParams(r)
	if err != nil {
		return err
	}
	br, err := s.branches.Branch(ctxOf(r), p, b)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, br)
	return nil
}

func (s *Server) deleteBranch(w http.ResponseWriter, r *http.Request) error {
	p, b, err := branchParams(r)
	if err != nil {
		return err
	}
	if err := s.branches.DeleteBranch(ctxOf(r), p, b); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) commitDir(w http.ResponseWriter, r *http.Request) error {
	p, b, err := branchParams(r)
	if err != nil {
		return err
	}
	var req wire.CommitDir
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := hostPath("from_path", req.FromPath, true); err != nil {
		return err
	}
	if err := checkCommitText(req.Message, req.Author); err != nil {
		return err
	}
	res, err := s.history.CommitDir(ctxOf(r), p, b, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func checkCommitText(msg, author string) error {
	if err := checkText("message", msg, 64<<10); err != nil {
		return err
	}
	return checkText("author", author, 1<<10)
}

func (s *Server) getCommit(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	ref := r.PathValue("ref")
	if err := checkRef("ref", ref); err != nil {
		return err
	}
	c, err := s.history.Commit(ctxOf(r), p, ref)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (s *Server) getLog(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	q, err := query(r.URL.Query(), "ref", "after", "limit")
	if err != nil {
		return err
	}
	if err := checkRef("query parameter ref", q["ref"]); err != nil {
		return err
	}
	if q["after"] != "" {
		if err := checkRef("query parameter after", q["after"]); err != nil {
			return err
		}
	}
	limit, err := intParam(q, "limit", 100, 1, 10000)
	if err != nil {
		return err
	}
	cs, err := s.history.Log(ctxOf(r), p, q["ref"], q["after"], limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nonNil(cs))
	return nil
}

func (s *Server) getDiff(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	q, err := query(r.URL.Query(), "from", "to", "cursor", "limit")
	if err != nil {
		return err
	}
	if err := checkRef("query parameter from", q["from"]); err != nil {
		return err
	}
	if err := checkRef("query parameter to", q["to"]); err != nil {
		return err
	}
	if err := checkText("query parameter cursor", q["cursor"], maxPathLen); err != nil {
		return err
	}
	limit, err := intParam(q, "limit", 1000, 1, 100000)
	if err != nil {
		return err
	}
	page, err := s.history.Diff(ctxOf(r), p, q["from"], q["to"], q["cursor"], limit)
	if err != nil {
		return err
	}
	if page.Changes == nil {
		page.Changes = []wire.Change{}
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func (s *Server) checkout(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	var req wire.Checkout
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkRef("ref", req.Ref); err != nil {
		return err
	}
	if err := hostPath("path", req.Path, true); err != nil {
		return err
	}
	res, err := s.history.Checkout(ctxOf(r), p, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) gc(w http.ResponseWriter, r *http.Request) error {
	var req wire.GCRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	res, err := s.maintenance.GC(ctxOf(r), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func (s *Server) fsck(w http.ResponseWriter, r *http.Request) error {
	var req wire.FsckRequest
	if err := decodeOptional(w, r, &req); err != nil {
		return err
	}
	rep, err := s.maintenance.Fsck(ctxOf(r), req)
	if err != nil {
		return err
	}
	if rep.Problems == nil {
		rep.Problems = []wire.FsckProblem{}
	}
	writeJSON(w, http.StatusOK, rep)
	return nil
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) error {
	st, err := s.maintenance.Stats(ctxOf(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// nonNil makes empty lists encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (s *Server) mergeBranch(w http.ResponseWriter, r *http.Request) error {
	p, err := projectParam(r)
	if err != nil {
		return err
	}
	var req wire.MergeRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := checkRef("source", req.Source); err != nil {
		return err
	}
	if err := checkName("into", req.Into); err != nil {
		return err
	}
	if err := checkPrefer(req.Prefer); err != nil {
		return err
	}
	if req.RenameThreshold < 0 || req.RenameThreshold > 100 {
		return invalid("rename_threshold %d: want a percentage, 1 to 100 (0: git's 50)", req.RenameThreshold)
	}
	if req.NoRenames && req.RenameThreshold != 0 {
		return invalid("rename_threshold %d with no_renames: one or the other", req.RenameThreshold)
	}
	if err := checkCommitText(req.Message, req.Author); err != nil {
		return err
	}
	res, err := s.history.MergeBranch(ctxOf(r), p, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func checkPrefer(p string) error {
	if p != "" && p != wire.PreferOurs && p != wire.PreferTheirs {
		return invalid("prefer %q: want %q or %q", p, wire.PreferOurs, wire.PreferTheirs)
	}
	return nil
}
