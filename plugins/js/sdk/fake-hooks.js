// Module resolution hook of the kubewasm fake host (fake.js registers it):
// the WIT imports the SDK reads (`kubewasm:plugin/cache@0.2.0`, ...) resolve
// to fake-imports.js, which answers them from the current FakeHost.
const imports = new URL('./fake-imports.js', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier.startsWith('kubewasm:plugin/')) return { url: imports, shortCircuit: true };
  return next(specifier, context);
}
