// Loads the wasm viewer; everything else happens in Rust (wasm-viewer/src).
import init from '/pkg/recap_viewer.js';

init({ module_or_path: '/pkg/recap_viewer_bg.wasm' }).catch((e) => {
  const boot = document.getElementById('boot');
  if (boot) boot.textContent = 'The viewer failed to start: ' + e;
  document.body.dataset.ready = 'error';
});
