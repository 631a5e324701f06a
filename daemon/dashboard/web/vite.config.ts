// Builds the dashboard and chat app into dist/dashboard/web, where the daemon serves them from /dashboard/.
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/dashboard/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: fileURLToPath(new URL('../../../dist/dashboard/web', import.meta.url)),
    emptyOutDir: true,
    // No inline scripts or styles: the page's Content-Security-Policy allows only files from the daemon.
    assetsInlineLimit: 0,
    sourcemap: false,
    target: 'es2022',
    // tools/verify-anchors.mjs imports node: modules only inside its command-line main(), which never runs in the page.
    rollupOptions: { external: [/^node:/] },
  },
  logLevel: 'warn',
});
