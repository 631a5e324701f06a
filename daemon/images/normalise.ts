// What leaves the daemon as an image is made here, whatever the engine produced: the size the client asked for
// (scaled to cover it and cropped from the centre, never stretched), the format it asked for, and no metadata at
// all (no EXIF, XMP, ICC profile or PNG text: an engine can write its prompt, its settings or a GPS position into
// them). The orientation an EXIF tag gives is applied to the pixels first, so the picture looks the same without it.
import sharp from 'sharp';

export const IMAGE_FORMATS = ['png', 'jpeg', 'webp'] as const;
export type ImageFormat = (typeof IMAGE_FORMATS)[number];

export const CONTENT_TYPES: Record<ImageFormat, string> = { png: 'image/png', jpeg: 'image/jpeg', webp: 'image/webp' };

/** The largest image decoded (pixels): a bigger one from an engine is refused rather than filling memory. */
const LARGEST_INPUT_PIXELS = 64 * 1024 * 1024;

export interface NormaliseOptions {
  /** null: keep the engine's size. */
  width: number | null;
  height: number | null;
  format: ImageFormat;
  /** 0–100, for jpeg and webp; default 90. */
  compression?: number;
}

export async function normaliseImage(input: Buffer, options: NormaliseOptions): Promise<Buffer> {
  let image = sharp(input, { limitInputPixels: LARGEST_INPUT_PIXELS, failOn: 'error' }).rotate();
  if (options.width && options.height) image = image.resize(options.width, options.height, { fit: 'cover', position: 'centre' });
  const quality = options.compression ?? 90;
  switch (options.format) {
    case 'png':
      image = image.png({ compressionLevel: 6 });
      break;
    case 'jpeg':
      // JPEG has no transparency: a transparent image is laid on white, not on black.
      image = image.flatten({ background: '#ffffff' }).jpeg({ quality, mozjpeg: true });
      break;
    case 'webp':
      image = image.webp({ quality });
      break;
  }
  return image.toBuffer();
}
