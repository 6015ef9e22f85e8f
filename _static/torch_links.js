// Torch source cited in cell outputs becomes links to the file at the pinned release.
// Chapters print either full addresses (https://github.com/pytorch/pytorch/blob/v2.13.0/path),
// or the same without https:// (or github.com/), or a line
// "under https://github.com/pytorch/pytorch/blob/v2.13.0/" followed by one path per line: each becomes <a href="...">...</a>. The printed text is
// unchanged (Jupyter and Colab show it as printed), so the stored outputs stay as nbval saw them.
document.addEventListener("DOMContentLoaded", () => {
  const full =
    /(?:https:\/\/)?(?:github\.com\/)?pytorch\/pytorch\/blob\/[\w.-]+\/(?:[\w.\/*-]*[\w\/])?/g;
  const base = /^under (https:\/\/github\.com\/pytorch\/pytorch\/blob\/[\w.-]+\/)\s*$/;
  const path = /^(\s*)((?:aten|c10|torch|tools|caffe2|build)\/[\w.\/-]*[\w\/])(\s*)$/;
  const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const link = (href, text) => `<a class="torch-source" href="${esc(href)}">${esc(text)}</a>`;
  for (const pre of document.querySelectorAll("div.cell_output pre, div.output pre")) {
    const text = pre.textContent;
    if (!text.includes("pytorch/pytorch/blob/")) continue;
    let under = null;
    const lines = text.split("\n").map((line) => {
      const b = line.match(base);
      if (b) { under = b[1]; return "under " + link(b[1], b[1]); }
      const p = under && line.match(path);
      if (p) return esc(p[1]) + link(under + p[2], p[2]) + esc(p[3]);
      let out = "", last = 0;
      for (const m of line.matchAll(full)) {
        const href = "https://github.com/" + m[0].replace(/^(https:\/\/)?(github\.com\/)?/, "");
        out += esc(line.slice(last, m.index)) + link(href, m[0]);
        last = m.index + m[0].length;
      }
      return out + esc(line.slice(last));
    });
    pre.innerHTML = lines.join("\n");
  }
});
