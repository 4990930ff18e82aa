export declare const LAYER_RANK: Readonly<Record<string, number>>;
export declare function sourceFiles(dir: string): Generator<string>;
export declare function importedPaths(text: string): string[];
export declare function importedPackages(text: string): string[];
export interface SourceImport {
  /** The importing file, relative to src/ with `/`. */
  from: string;
  /** The importer's top folder under src/, `""` for the package entries. */
  fromLayer: string;
  /** The module as written (`../bus/index.js`). */
  spec: string;
  /** The module resolved, relative to src/ with `/`. */
  target: string;
  targetLayer: string;
}
export declare function sourceImports(srcDir: string): SourceImport[];
export declare function crossLayerImports(srcDir: string): SourceImport[];
