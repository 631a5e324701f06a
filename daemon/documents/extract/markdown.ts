// Markdown to plain text from markdown-it's token stream: what a reader sees, without the syntax. Blocks end in a
// blank line, list items and table rows in a line break; link and image text stay, their URLs go; code keeps its
// lines. Raw HTML blocks go through the HTML extractor, so markup written inside markdown leaves no tags behind.
import MarkdownIt, { type Token } from 'markdown-it';
import { htmlToText } from './html.js';
import { TextWriter } from './plain-text.js';

// Linkify and typographer stay off: neither adds text, and quotes are better left as the author typed them.
const parser = new MarkdownIt({ html: true });

export function markdownToText(source: string): string {
  const out = new TextWriter();
  for (const token of parser.parse(source, {})) {
    switch (token.type) {
      case 'inline':
        inline(token.children ?? [], out);
        break;
      case 'paragraph_close':
        // A tight list's paragraphs are hidden: its items stay on consecutive lines.
        if (token.hidden) out.lineBreak();
        else out.paragraphBreak();
        break;
      case 'list_item_open':
        out.lineBreak();
        // The number of an ordered item is content ("see step 3"); a bullet is not.
        if (token.info) out.inline(`${token.info}${token.markup} `);
        break;
      case 'list_item_close':
      case 'tr_close':
        out.lineBreak();
        break;
      case 'th_close':
      case 'td_close':
        out.cell();
        break;
      case 'fence':
      case 'code_block':
        out.verbatim(token.content);
        out.paragraphBreak();
        break;
      case 'html_block':
        out.verbatim(htmlToText(token.content));
        out.paragraphBreak();
        break;
      case 'heading_close':
      case 'bullet_list_close':
      case 'ordered_list_close':
      case 'blockquote_close':
      case 'table_close':
      case 'hr':
        out.paragraphBreak();
        break;
    }
  }
  return out.toString();
}

function inline(tokens: Token[], out: TextWriter): void {
  for (const token of tokens) {
    switch (token.type) {
      case 'text':
      case 'code_inline':
        out.inline(token.content);
        break;
      case 'image':
        // The alt text is the image's words; the address is not.
        out.inline(token.content);
        break;
      case 'softbreak':
        out.inline(' ');
        break;
      case 'hardbreak':
        out.lineBreak();
        break;
      case 'html_inline':
        if (/^<br\b/i.test(token.content)) out.lineBreak();
        break;
    }
  }
}
