// Links to addresses the page did not make (a node's viewer URL, shipped by
// an agent's collector). Parsed with URL and kept only when http or https: a
// javascript:, data: or relative "URL" never becomes an href.

import { h } from "./dom";

/** The URL, normalised, when it is an absolute http(s) URL with a host; else null. */
export function webUrl(raw: string): string | null {
  if (!raw) return null;
  let url: URL;
  try {
    url = new URL(raw); // no base: a relative reference throws
  } catch {
    return null;
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || !url.hostname) return null;
  return url.href;
}

/** An <a> to `raw` opening in a new tab, or null when `raw` is no web URL. */
export function externalLink(raw: string, text: string, title?: string): HTMLAnchorElement | null {
  const href = webUrl(raw);
  if (href === null) return null;
  // noopener, noreferrer: the node's viewer gets neither this window nor this page's address.
  return h("a", { href, target: "_blank", rel: "noopener noreferrer", class: "external", title: title ?? href }, text);
}

/** `text` linked to `raw` when that is a web URL, else plain text. */
export function linkedText(raw: string, text: string, title?: string): HTMLElement {
  return externalLink(raw, text, title) ?? h("span", null, text);
}
