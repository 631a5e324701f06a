export { ImageFiles } from './files.js';
export { CONTENT_TYPES, IMAGE_FORMATS, normaliseImage, type ImageFormat, type NormaliseOptions } from './normalise.js';
