// Loads the wasm viewer; everything else happens in Rust (wasm-viewer/src). The module is imported
// dynamically so that a host without the built viewer gets a page that says so, not a blank one.
const boot = document.getElementById('boot');

function fail(message) {
  if (boot) boot.textContent = message;
  document.body.dataset.ready = 'error';
}

import('/pkg/recap_viewer.js')
  .catch((e) => {
    throw new Error(
      'The viewer\'s code could not be loaded (' + e.message + '). This host was built without the ' +
        'viewer: run `cargo xtask wasm` in the repository, then rebuild recap, or start it with ' +
        '`recap serve --web PATH/TO/web`. The API works without it: /api/archives.'
    );
  })
  .then((viewer) => viewer.default({ module_or_path: '/pkg/recap_viewer_bg.wasm' }))
  .catch((e) => fail(e.message.startsWith('The viewer') ? e.message : 'The viewer failed to start: ' + e));
