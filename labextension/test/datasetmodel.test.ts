import { describe, expect, it } from 'vitest';

import {
  baseName,
  breadcrumbs,
  formatSize,
  isInside,
  normalizeUrl,
  parentUrl,
  parseDataUrl,
  sortEntries
} from '../src/datasetmodel';

describe('the datasets path model', () => {
  it('splits URLs and local paths', () => {
    expect(parseDataUrl('s3://bucket/a//b/')).toEqual({
      prefix: 's3://',
      parts: ['bucket', 'a', 'b'],
      absolute: false
    });
    expect(parseDataUrl('/data/imagenet')).toEqual({
      prefix: '',
      parts: ['data', 'imagenet'],
      absolute: true
    });
    expect(normalizeUrl('oss://b/x/')).toBe('oss://b/x');
    expect(normalizeUrl('/')).toBe('/');
  });

  it('knows what is inside a store', () => {
    expect(isInside('s3://b/x/y', 's3://b/x')).toBe(true);
    expect(isInside('s3://b/x', 's3://b/x/')).toBe(true);
    expect(isInside('s3://b/xy', 's3://b/x')).toBe(false); // a prefix of the text, not a folder
    expect(isInside('oss://b/x/y', 's3://b/x')).toBe(false);
    expect(isInside('/b/x/y', 's3://b/x')).toBe(false);
  });

  it('goes up, but never above the store', () => {
    expect(parentUrl('s3://b/x/y/z', 's3://b/x')).toBe('s3://b/x/y');
    expect(parentUrl('s3://b/x/y', 's3://b/x')).toBe('s3://b/x');
    expect(parentUrl('s3://b/x', 's3://b/x')).toBeNull();
    expect(parentUrl('/srv/data/train', '/srv/data')).toBe('/srv/data');
    expect(parentUrl('s3://other/y', 's3://b/x')).toBeNull();
  });

  it('makes breadcrumbs from the store down', () => {
    expect(breadcrumbs('s3://b/x/y/z', 's3://b/x/')).toEqual([
      { label: 's3://b/x', url: 's3://b/x' },
      { label: 'y', url: 's3://b/x/y' },
      { label: 'z', url: 's3://b/x/y/z' }
    ]);
    expect(breadcrumbs('/srv/data', '/srv/data')).toEqual([
      { label: '/srv/data', url: '/srv/data' }
    ]);
    expect(breadcrumbs('gs://elsewhere/a', 's3://b')).toEqual([
      { label: 'gs://elsewhere/a', url: 'gs://elsewhere/a' }
    ]);
  });

  it('shows short names, folders first, and sizes as the CLI prints them', () => {
    expect(baseName('s3://b/x/train.csv')).toBe('train.csv');
    expect(baseName('/srv/data/raw')).toBe('raw');
    const sorted = sortEntries([
      { name: 's3://b/x/z.csv', type: 'file' },
      { name: 's3://b/x/b', type: 'directory' },
      { name: 's3://b/x/a.csv', type: 'file' }
    ]);
    expect(sorted.map(e => baseName(e.name))).toEqual(['b', 'a.csv', 'z.csv']);
    expect([
      formatSize(0),
      formatSize(999),
      formatSize(1500),
      formatSize(2_000_000),
      formatSize(3e15)
    ]).toEqual(['0 B', '999 B', '1.5 KB', '2.0 MB', '3000.0 TB']);
    expect(formatSize(NaN)).toBe('–');
  });
});
