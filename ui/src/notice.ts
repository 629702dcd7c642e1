// One plain notice line under the top bar.

let timer: number | undefined;

export function notice(text: string, kind: "info" | "warn" | "error" = "info", ms = 8000): void {
  const el = document.getElementById("notice");
  if (!el) return;
  el.textContent = text;
  el.className = `notice ${kind}`;
  el.hidden = false;
  window.clearTimeout(timer);
  if (ms > 0) timer = window.setTimeout(() => (el.hidden = true), ms);
}

export function clearNotice(): void {
  const el = document.getElementById("notice");
  if (el) el.hidden = true;
}

export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
