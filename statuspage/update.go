package statuspage

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"

	"github.com/watertight/watertight"
)

// updatable is a pipeline whose settings the page can change.
type updatable interface {
	Update(watertight.Config) error
	Config() watertight.Config
}

// maxForm bounds an update's body.
const maxForm = 64 << 10

// update serves a POST of the form: the token, a pipeline's name and its
// settings as JSON. A success answers the page, saying so; a failure
// answers 400 or 403 with the page and the error.
func (pg *Page) update(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		pg.render(w, http.StatusBadRequest, "", "statuspage: "+err.Error())
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(pg.token)) != 1 {
		pg.render(w, http.StatusForbidden, "", "statuspage: the form's token is missing or not this page's: load the page again")
		return
	}
	name := r.PostForm.Get("pipeline")
	u, ok := pg.byName[name].(updatable)
	if !ok {
		pg.render(w, http.StatusBadRequest, "", "statuspage: no pipeline named "+name+" can be updated")
		return
	}
	var cfg watertight.Config
	if err := json.Unmarshal([]byte(r.PostForm.Get("config")), &cfg); err != nil {
		pg.render(w, http.StatusBadRequest, "", name+": "+err.Error())
		return
	}
	if err := u.Update(cfg); err != nil {
		pg.render(w, http.StatusBadRequest, "", name+": "+err.Error())
		return
	}
	pg.render(w, http.StatusOK, name, "")
}
