package api

import (
	"context"
	"net/http"

	"layerfs.dev/layerfs/wire"
)

// handlerFunc is a handler that returns its error; the wrapper answers it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// Route kinds: reads are served while draining; work is refused then and
// counted for WaitIdle; execs are also counted as running execs.
const (
	read = iota
	work
	execWork
)

func (s *Server) routes() {
	s.handle("GET /v1/version", read, s.getVersion)
	s.handle("GET /v1/daemon", read, s.getDaemon)
	s.handle("POST /v1/daemon/stop", read, s.stopDaemon)
	s.mux.HandleFunc("GET /metrics", s.getMetrics)

	s.handle("GET /v1/projects", read, s.listProjects)
	s.handle("POST /v1/projects", work, s.createProject)
	s.handle("GET /v1/projects/{p}", read, s.getProject)
	s.handle("GET /v1/projects/{p}/layers", read, s.listLayers)
	s.handle("POST /v1/projects/{p}/layers", work, s.addLayer)
	s.handle("GET /v1/projects/{p}/branches", read, s.listBranches)
	s.handle("POST /v1/projects/{p}/branches", work, s.forkBranch)
	s.handle("GET /v1/projects/{p}/branches/{b}", read, s.getBranch)
	s.handle("DELETE /v1/projects/{p}/branches/{b}", work, s.deleteBranch)
	s.handle("POST /v1/projects/{p}/branches/{b}/commits", work, s.commitDir)
	s.handle("GET /v1/projects/{p}/commits/{ref}", read, s.getCommit)
	s.handle("GET /v1/projects/{p}/log", read, s.getLog)
	s.handle("GET /v1/projects/{p}/diff", read, s.getDiff)
	s.handle("POST /v1/projects/{p}/checkout", work, s.checkout)
	s.handle("POST /v1/projects/{p}/merges", work, s.mergeBranch)

	s.handle("POST /v1/workspaces", work, s.createWorkspace)
	s.handle("GET /v1/workspaces", read, s.listWorkspaces)
	s.handle("GET /v1/workspaces/{id}", read, s.getWorkspace)
	s.handle("DELETE /v1/workspaces/{id}", work, s.endWorkspace)
	s.handle("POST /v1/workspaces/{id}/commit", work, s.commitWorkspace)
	s.handle("POST /v1/workspaces/{id}/mount", work, s.mountWorkspace)
	s.handle("POST /v1/workspaces/{id}/update", work, s.updateWorkspace)
	s.handle("POST /v1/workspaces/{id}/resolve", work, s.resolveConflicts)
	s.handle("POST /v1/workspaces/{id}/fork", work, s.forkWorkspace)
	s.handle("PUT /v1/workspaces/{id}/network", work, s.setNetwork)
	s.handle("POST /v1/workspaces/{id}/execs", execWork, s.exec)
	s.handle("POST /v1/workspaces/{id}/attach", execWork, s.attach)
	s.handle("PUT /v1/workspaces/{id}/files/{path...}", work, s.putFile)
	s.handle("GET /v1/workspaces/{id}/files/{path...}", read, s.getFile)
	s.handle("PUT /v1/workspaces/{id}/tar", work, s.putTar)
	s.handle("GET /v1/workspaces/{id}/tar", read, s.getTar)
	s.handle("GET /v1/workspaces/{id}/stat", read, s.statPath)
	s.handle("GET /v1/workspaces/{id}/list", read, s.listDir)
	s.handle("GET /v1/workspaces/{id}/events", read, s.events)
	s.handle("POST /v1/workspaces/{id}/services", work, s.startService)
	s.handle("GET /v1/workspaces/{id}/services", read, s.listServices)
	s.handle("POST /v1/workspaces/{id}/services/{name}/stop", work, s.stopService)
	s.handle("POST /v1/workspaces/{id}/services/{name}/wait", read, s.waitService)
	s.handle("GET /v1/workspaces/{id}/services/{name}/logs", read, s.serviceLogs)
	s.handle("POST /v1/workspaces/{id}/ports/{port}/connect", read, s.connectPort)
	s.handle("/v1/workspaces/{id}/ports/{port}/{path...}", read, s.previewPort)
	s.handle("POST /v1/workspaces/{id}/shares", work, s.sharePort)
	s.handle("GET /v1/workspaces/{id}/shares", read, s.listShares)
	s.handle("DELETE /v1/workspaces/{id}/shares/{port}", work, s.unsharePort)
	s.handle(wire.SharePrefix+"{token}/{path...}", read, s.sharedPort)

	s.handle("GET /v1/images", read, s.listImages)
	s.handle("POST /v1/images", work, s.importImage)
	s.handle("POST /v1/images/push", work, s.pushImage)
	s.handle("POST /v1/images/build", work, s.buildImage)
	s.handle("GET /v1/images/{name...}", read, s.getImage)
	s.handle("DELETE /v1/images/{name...}", work, s.removeImage)
	s.handle("POST /v1/workspaces/{id}/image", work, s.commitImage)
	s.handle("PUT /v1/projects/{p}/image", work, s.setProjectImage)

	s.handle("POST /v1/gc", work, s.gc)
	s.handle("POST /v1/fsck", read, s.fsck)
	s.handle("GET /v1/stats", read, s.stats)

}

func (s *Server) handle(pattern string, kind int, h handlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if kind != read {
			ctx, done, ok := s.beginWork(r.Context(), kind == execWork)
			if !ok {
				s.fail(w, r, unavailable("the daemon is shutting down and accepts no new work"))
				return
			}
			defer done()
			r = r.WithContext(ctx)
		}
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

// ctxOf is r's context; a named helper keeps handlers short.
func ctxOf(r *http.Request) context.Context { return r.Context() }
